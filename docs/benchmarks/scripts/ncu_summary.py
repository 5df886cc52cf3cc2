"""One row per launch of an Nsight Compute text report (the sections `ncu_step.py`'s docstring names): duration,
registers, local spill requests, dynamic shared memory, achieved occupancy, IPC, DRAM throughput and L2 hit rate.

    python3 docs/benchmarks/scripts/ncu_summary.py ncu_fp32.txt
"""
import re
import sys

FIELDS = (
    ("registers", r"Registers Per Thread\s+register/thread\s+(\d+)"),
    ("local spill requests", r"Local Memory Spilling Requests\s+([\d,]+)"),
    ("dyn. shared KB", r"Dynamic Shared Memory Per Block\s+Kbyte/block\s+([\d.]+)"),
    ("achieved occupancy %", r"Achieved Occupancy\s+%\s+([\d.]+)"),
    ("IPC", r"Executed Ipc Active\s+inst/cycle\s+([\d.]+)"),
    ("DRAM %", r"DRAM Throughput\s+%\s+([\d.]+)"),
    ("L2 hit %", r"L2 Hit Rate\s+%\s+([\d.]+)"),
)


def main():
    parts = re.split(r"\n  (\w+) \(", open(sys.argv[1]).read())
    print("| launch (in step order) | duration | " + " | ".join(name for name, _ in FIELDS) + " |")
    print("|---|" + "---:|" * (len(FIELDS) + 1))
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        dur = re.search(r"Duration\s+(\w+)\s+([\d.,]+)", body)
        cells = [(m.group(1) if (m := re.search(pat, body)) else "-") for _, pat in FIELDS]
        print(f"| {name} | {dur.group(2)} {dur.group(1)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

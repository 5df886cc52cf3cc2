"""Compile the entries of `triton_kda.specs.compile_specs` whose names match, for chosen architectures: the
portability check of a change's new launch configurations without the whole six-architecture table.

    PYTHONPATH=. python3 docs/benchmarks/scripts/portability_subset.py --arch 80,86,100,120 \
        --match "narrow,intra_bwd K64 V64 BT32 fp16,..." [--jobs 2]

`--match` keeps a spec whose name contains one of the comma-separated parts. Prints a markdown row per (spec, arch)
(shared memory against the limit, registers, spills, pass) and a one-line summary last; exit 1 if any row fails.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.getcwd())

from triton_kda.check.portability import check_portability  # noqa: E402
from triton_kda.specs import compile_specs  # noqa: E402

def matching_specs(arch: int):
    """compile_specs(arch) filtered by PORTABILITY_SUBSET_MATCH (a module-level function: workers list it too)."""
    parts = [p for p in os.environ["PORTABILITY_SUBSET_MATCH"].split(",") if p]
    return [s for s in compile_specs(arch) if any(p in s.name for p in parts)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="80,86,100,120")
    ap.add_argument("--match", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    os.environ["PORTABILITY_SUBSET_MATCH"] = args.match  # inherited by the spawned workers
    rows = check_portability(matching_specs, [int(a) for a in args.arch.split(",")], progress=False, jobs=args.jobs)
    print("| kernel | arch | warps | stages | shared B | limit B | registers | spill stores | passed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.kernel} | {r.arch} | {r.num_warps} | {r.num_stages} | {r.shared} | {r.smem_limit} | "
              f"{r.registers} | {r.spill_stores} | {'yes' if r.passed else 'NO: ' + r.reason} |")
    failed = [r for r in rows if not r.passed]
    print(f"summary: {len(rows)} rows, {len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""Time ``chunk_kda`` as a user calls it (default dispatch) from two checkouts on one GPU: a base tree against this one.

    python -m benchmarks.ab --base DIR [--shapes B2-T8192-H32] [--flags kimi] [--modes fwdbwd] [--rounds 3]

Each round runs one child process per tree, alternating which goes first, so drift of the card's clocks falls on
both. A child imports ``triton_kda`` and ``cuda_fast`` from its tree (the inputs, shapes and flag sets from this
one, so both time the same tensors), times every (shape, flag set, mode) with ``benchmarks.timing.cuda_timer``
(``do_bench``'s median) and prints one JSON line per row with the backends that served the calls. The parent prints
a markdown table of the median over rounds of each tree's medians and their ratio (this / base), and the summary
last. ``--out DIR`` also writes the rows as ``DIR/ab.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.cli import csv_choice, positive_int, require_cuda
from benchmarks.suites import FLAG_SETS, parse_shape

HERE = Path(__file__).resolve().parents[1]
ROW_TAG = "AB_ROW "
MODES = ("fwd", "fwdbwd")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="the base checkout (a folder holding triton_kda/)")
    p.add_argument("--shapes", default="B2-T8192-H32",
                   help="comma-separated B2-T8192-H32[-HV64][-K128][-V128][-bf16|fp16|fp32] (default B2-T8192-H32)")
    p.add_argument("--flags", type=csv_choice(tuple(FLAG_SETS)), default=["kimi"],
                   help=f"flag sets, comma-separated: {', '.join(FLAG_SETS)} (default: kimi)")
    p.add_argument("--modes", type=csv_choice(MODES), default=["fwdbwd"], help="fwd, fwdbwd (default: fwdbwd)")
    p.add_argument("--rounds", type=positive_int, default=3, help="child processes per tree (default 3)")
    p.add_argument("--warmup-ms", type=positive_int, default=50)
    p.add_argument("--rep-ms", type=positive_int, default=300)
    p.add_argument("--out", type=Path, help="also write the rows as OUT/ab.jsonl")
    p.add_argument("--child", metavar="TREE", help=argparse.SUPPRESS)
    return p


def child(args) -> None:
    """Time every case with triton_kda from ``args.child``; print one ROW_TAG line per case."""
    import torch

    import reference.harness  # noqa: F401  (this tree's, imported before the tree goes first on the path)
    from benchmarks.cases import make_case_inputs, random_like_output
    from benchmarks.timing import cuda_timer

    sys.path.insert(0, str(Path(args.child).resolve()))
    from triton_kda import backend_report, chunk_kda

    device = torch.device("cuda")
    timer = cuda_timer(args.warmup_ms, args.rep_ms)
    for text in args.shapes.split(","):
        shape = parse_shape(text)
        for flags in args.flags:
            kwargs = make_case_inputs(shape, FLAG_SETS[flags], device=device, seed=0, requires_grad=True)
            do = random_like_output(shape, device=device, seed=1)
            leaves = [t for t in kwargs.values() if torch.is_tensor(t) and t.requires_grad]

            for mode in args.modes:
                fn = _call(chunk_kda, kwargs, leaves, do, mode)
                fn()
                served = sorted({f"{e.op}:{e.name}" for e in backend_report()})
                ms = timer(fn)[0]
                row = dict(tree=args.child, shape=shape.label, dtype=shape.dtype, flags=flags, mode=mode, ms=ms,
                           served=served)
                print(ROW_TAG + json.dumps(row), flush=True)


def _call(chunk_kda, kwargs: dict, leaves: list, do, mode: str):
    """The timed call: the forward under no_grad ("fwd"), or forward and the gradients of every leaf ("fwdbwd")."""
    import torch

    def fwd():
        with torch.no_grad():
            chunk_kda(**kwargs)

    def fwdbwd():
        o, _ = chunk_kda(**kwargs)
        torch.autograd.grad(o, leaves, do)

    return fwd if mode == "fwd" else fwdbwd


def run_child(tree: Path, args) -> list[dict]:
    """One child process for ``tree``; its rows."""
    cmd = [sys.executable, "-m", "benchmarks.ab", "--base", str(args.base), "--child", str(tree),
           "--shapes", args.shapes, "--flags", ",".join(args.flags), "--modes", ",".join(args.modes),
           "--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)]
    done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    if done.returncode != 0:
        raise RuntimeError(f"child for {tree} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return [json.loads(line[len(ROW_TAG):]) for line in done.stdout.splitlines() if line.startswith(ROW_TAG)]


def table(rows: list[dict], base: str, this: str) -> list[str]:
    """Markdown lines: per (shape, dtype, flags, mode) the median over rounds of each tree's medians, the ratio
    this / base, and what served this tree's calls; the last line is the geometric mean of the ratios."""
    keys = list(dict.fromkeys((r["shape"], r["dtype"], r["flags"], r["mode"]) for r in rows))
    lines = ["| shape | dtype | flags | mode | base ms | this ms | this / base | served (this) |",
             "|---|---|---|---|---:|---:|---:|---|"]
    ratios = []
    for key in keys:
        got = {t: [r for r in rows if (r["shape"], r["dtype"], r["flags"], r["mode"]) == key and r["tree"] == t]
               for t in (base, this)}
        if not got[base] or not got[this]:
            continue
        b, t = (statistics.median(r["ms"] for r in got[x]) for x in (base, this))
        ratios.append(t / b)
        lines.append(f"| {' | '.join(key)} | {b:.3f} | {t:.3f} | x{t / b:.3f} | {', '.join(got[this][0]['served'])} |")
    if ratios:
        lines.append(f"summary: this / base geomean x{statistics.geometric_mean(ratios):.3f} over {len(ratios)} rows")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        child(args)
        return 0
    message = require_cuda("benchmarks.ab")
    if message:
        print(message, file=sys.stderr)
        return 2
    base, this = str(args.base.resolve()), str(HERE)
    rows = []
    for r in range(args.rounds):
        for tree in ((base, this) if r % 2 == 0 else (this, base)):
            rows += run_child(Path(tree), args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"base: {base}\nthis: {this}")
    print("\n".join(table(rows, base, this)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Side-by-side benchmark of ``chunk_kda``: ours (``triton_kda``) against fla, in one process on one CUDA GPU.

    python -m benchmarks.run --suite standard --impl auto,fla --modes fwd,fwdbwd --flags kimi --out DIR
    python -m benchmarks.run --suite kimi --quick --out DIR          # at most 2 shapes sharing H per suite
    python -m benchmarks.run --cold-start --out DIR                  # process start -> first fwd+bwd, fresh caches
    python -m benchmarks.run --suite gva --tune-cache DIR --out DIR  # keep fla's autotuning between device calls
    python -m benchmarks.run --suite decode --out DIR                # fused_recurrent_kda decode step, state pool

For every (suite, shape, flag set) the inputs are built once (several rotated sets, so the working set exceeds
L2) and every implementation runs on the same tensors:
1. a first forward (wall time printed: compile + autotune), checked against the fp64 oracle on the first sequence
   truncated to 1024 tokens; an implementation that fails is not timed (its rows say why);
2. ``fwd``: forward under ``torch.no_grad()``, timed with ``triton.testing.do_bench`` (median, p20, p80);
3. ``fwdbwd``: forward + ``o.backward(do)`` into q, k, v, g, beta, after a first call (wall time printed) and a
   gradient check against the fp64 oracle on a small case with the same heads.
Rows (JSON lines, one file per run under --out) carry the times, the speedup against fla, the achieved rates of
``benchmarks.model`` against the copy bandwidth and bf16 matmul rate measured in the same run, the peak memory,
the oracle errors and the provenance. ``python -m benchmarks.report`` renders them.
The ``decode`` suite times one serving decode step of ``fused_recurrent_kda`` against fla's instead
(``benchmarks.decode``: rows of kind "decode", also written as ``decode.md`` under --out).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import decode, model, tune_cache
from benchmarks.cases import bench_case, describe, make_case_inputs, random_like_output
from benchmarks.cli import JsonlWriter, csv_choice, fmt, log, output_path, positive_int, require_cuda
from benchmarks.impls import DEFAULT_IMPLS, IMPLS, load_impls
from benchmarks.provenance import REPO, provenance
from benchmarks.suites import (
    DECODE_SLOTS,
    DECODE_SUITES,
    FLAG_SETS,
    SUITES,
    resolve_flags,
    resolve_suites,
    select_shapes,
)
from benchmarks.timing import cuda_timer, measure_ceilings, synchronize

COLD_START_TAG = "COLD_START_RESULT "


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=csv_choice((*SUITES, "all")), default=["standard"],
                        help=f"shape suites, comma-separated: {', '.join(SUITES)}, all (default: standard)")
    parser.add_argument("--impl", type=csv_choice(IMPLS), default=list(DEFAULT_IMPLS),
                        help="implementations, comma-separated: auto (chunk_kda as a user calls it), triton / sm90 "
                             "(that backend forced for the forward), fla (default: auto,fla)")
    parser.add_argument("--modes", type=csv_choice(model.MODES), default=list(model.MODES),
                        help="fwd and/or fwdbwd (default: both)")
    parser.add_argument("--flags", type=csv_choice(tuple(FLAG_SETS)), default=["kimi"],
                        help=f"flag sets, comma-separated: {', '.join(FLAG_SETS)} (default: kimi)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for the JSONL rows")
    parser.add_argument("--quick", action="store_true",
                        help="at most 2 shapes per suite, sharing H (fla tunes once per suite); short timings")
    parser.add_argument("--max-shapes", type=positive_int, default=None, help="at most N shapes per suite")
    parser.add_argument("--shapes", type=lambda text: tuple(filter(None, text.split(","))), default=(),
                        help="only the suites' shapes whose label contains one of these comma-separated parts "
                             "(e.g. B2-T8192-H64,T65536)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first input set")
    parser.add_argument("--warmup-ms", type=positive_int, default=None,
                        help="do_bench warm-up in ms (default 100, quick 50)")
    parser.add_argument("--rep-ms", type=positive_int, default=None,
                        help="do_bench repetition in ms (default 500, quick 200)")
    parser.add_argument("--cold-start", action="store_true",
                        help="only measure process start -> first finished fwd+bwd in fresh subprocesses "
                             "(first shape of the first suite, first flag set, fresh Triton cache)")
    parser.add_argument("--cold-start-timeout", type=positive_int, default=480,
                        help="seconds allowed to each cold-start subprocess (default 480; fla's first fwd+bwd "
                             "autotunes for minutes, so time one --impl per device call)")
    parser.add_argument("--cold-start-child", choices=IMPLS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tune-cache", type=Path, default=None,
                        help="folder of saved Triton autotuning results (benchmarks/tune_cache.py): restored before "
                             "the first call, saved after every case; fla then skips the tuning it already did")
    return parser


def run_cold_start(args: argparse.Namespace, context: dict, writer: JsonlWriter) -> None:
    """Each implementation in a fresh subprocess with an empty Triton cache: process start -> first fwd+bwd."""
    suite = next(iter(resolve_suites(args.suite)))
    shape, flags = SUITES[suite][0], resolve_flags(args.flags)[0]
    for name in args.impl:
        cache = tempfile.mkdtemp(prefix=f"kda-cold-{name}-")
        env = dict(os.environ, TRITON_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        log(f"cold start {name} {shape.label} {flags.name}: fresh process, Triton cache {cache}")
        t0 = time.time()
        cmd = [sys.executable, "-m", "benchmarks.run", "--cold-start-child", name, "--suite", suite,
               "--flags", flags.name, "--seed", str(args.seed), "--t0", repr(t0)]
        row = {"kind": "cold_start", "impl": name, "mode": "fwdbwd", "suite": suite, "shape": shape.label,
               "flags": flags.name, "dtype": shape.dtype, "status": "error", "reason": None, **context}
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.cold_start_timeout)
        except subprocess.TimeoutExpired:
            row["reason"] = f"no result within {args.cold_start_timeout} s"
        else:
            lines = [line for line in done.stdout.splitlines() if line.startswith(COLD_START_TAG)]
            if lines:
                row.update(json.loads(lines[-1][len(COLD_START_TAG):]))
            else:
                row["reason"] = f"exit code {done.returncode}: {(done.stderr or done.stdout)[-800:]}"
        row["parent_wall_s"] = round(time.time() - t0, 2)
        writer.write([row])
        log(f"cold start {name}: {row['status']} {fmt(row.get('cold_start_s'), '.1f')} s to the first fwd+bwd "
            f"(first call {fmt(row.get('first_call_s'), '.1f')} s) {row['reason'] or ''}")


def cold_start_child(args: argparse.Namespace) -> int:
    """Child side of --cold-start: import, build inputs, one fwd+bwd, print one tagged JSON result line."""
    result = {"status": "error", "reason": None}
    message = require_cuda("benchmarks.run --cold-start")
    if message is not None:
        result["reason"] = message
    else:
        impl = load_impls([args.cold_start_child])[args.cold_start_child]
        result["import_s"] = round(time.time() - args.t0, 2)
        if isinstance(impl, str):
            result["reason"] = impl
        else:
            device = torch.device("cuda")
            shape = SUITES[args.suite[0]][0]
            kwargs = make_case_inputs(shape, resolve_flags(args.flags)[0], device=device, seed=args.seed,
                                      requires_grad=True)
            do = random_like_output(shape, device=device, seed=args.seed + 1000)
            synchronize(device)
            t1 = time.time()
            try:
                o, _ = impl(**kwargs)
                o.backward(do)
                synchronize(device)
            except NotImplementedError as exc:
                result.update(status="unsupported", reason=f"NotImplementedError: {exc}")
            else:
                t2 = time.time()
                result.update(status="ok", cold_start_s=round(t2 - args.t0, 2), first_call_s=round(t2 - t1, 2))
    print(COLD_START_TAG + json.dumps(result), flush=True)
    return 0 if result["status"] == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cold_start_child is not None:
        if args.t0 is None:
            args.t0 = time.time()
        return cold_start_child(args)
    message = require_cuda("benchmarks.run")
    if message is not None:
        print(message, file=sys.stderr, flush=True)
        return 2
    device = torch.device("cuda")
    restored = tune_cache.restore(args.tune_cache) if args.tune_cache else 0
    suites = resolve_suites(args.suite)
    flag_sets = resolve_flags(args.flags)
    prov = provenance(device)
    log(f"GPU {prov['gpu']} (cc {prov['cc']}, {prov['sm_count']} SMs, L2 {prov['l2_mb']} MB); torch {prov['torch']}, "
        f"CUDA {prov['cuda']}, triton {prov['triton']}, fla {prov['fla']}, git {prov['git_sha'][:12]}")
    stem = "cold-start" if args.cold_start else "bench-" + "-".join(suites) + ("-quick" if args.quick else "")
    writer = JsonlWriter(output_path(args.out, stem))
    log(f"rows -> {writer.path}")
    if args.cold_start:
        run_cold_start(args, prov, writer)
        return 0
    warmup_ms = args.warmup_ms or (50 if args.quick else 100)
    rep_ms = args.rep_ms or (200 if args.quick else 500)
    timer = cuda_timer(warmup_ms, rep_ms)
    context = {**prov, **measure_ceilings(timer, device),
               "autotune_cache": f"{restored} results restored" if restored else "fresh"}
    decode_rows = []
    for suite in DECODE_SUITES:
        for shape in select_shapes(suites.pop(suite, ()), max_shapes=args.max_shapes, labels=args.shapes):
            for flags in flag_sets:
                log(f"--- decode {shape.label} {flags.name}: pool of {DECODE_SLOTS} slots")
                rows = decode.bench_shape(shape, flags, args.impl, timer, context, slots=DECODE_SLOTS,
                                          device=device, seed=args.seed)
                writer.write(rows)
                decode_rows += rows
                for row in rows:
                    log(decode.describe(row))
    if decode_rows:
        (args.out / "decode.md").write_text(decode.markdown(decode_rows) + "\n")
    impls = load_impls(args.impl) if suites else {}
    plan = [(suite, shape, flags) for suite, shapes in suites.items()
            for shape in select_shapes(shapes, quick=args.quick, max_shapes=args.max_shapes, labels=args.shapes)
            for flags in flag_sets]
    head_configs = {(shape.H, shape.HV, shape.K, shape.V, shape.varlen) for _, shape, _ in plan}
    log(f"{len(plan)} cases x {len(args.impl)} impls x modes {','.join(args.modes)}; "
        f"{len(head_configs)} head configurations (fla autotunes each: minutes on a fresh machine)")
    for i, (suite, shape, flags) in enumerate(plan, 1):
        log(f"--- case {i}/{len(plan)}")
        rows = bench_case(suite, shape, flags, impls, args.modes, device=device, timer=timer, context=context,
                          seed=args.seed)
        writer.write(rows)
        for row in rows:
            log(describe(row))
        if args.tune_cache:
            log(f"autotune results: {restored} restored, {tune_cache.save(args.tune_cache)} saved to {args.tune_cache}")
    log(f"done: rows in {writer.path}; render with: python -m benchmarks.report {writer.path} --out DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())

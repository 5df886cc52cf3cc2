"""One GPU call that checks our ``chunk_kda`` against the fp64 oracle, then times it against fla.

    python -m benchmarks.gpu_check [--out DIR] [--shapes B2-T8192-H32,B8-T2048-H32] [--modes fwd,fwdbwd]
                                   [--flags kimi] [--no-fla] [--skip-checks] [--skip-timing]
                                   [--check-budget-s 240] [--budget-s 420] [--tune-cache DIR]

1. Checks (ours only, small cases: fixed, varlen with an empty sequence, GVA, kimi flags, softplus gate, strong
   gate with chunk 32, initial/final states in both layouts; every case in bf16, some in fp16 and fp32; checks
   not started within ``--check-budget-s`` are listed as skipped):
   - ``fwd``: o and the final state against ``reference.kda.kda_recurrent`` (fp64), rel RMSE within FWD_TOL;
   - ``bwd``: gradients of q, k, v, g, beta (and initial_state, A_log, dt_bias where present) within BWD_TOL;
     a backward that raises NotImplementedError is reported as unsupported, not as a failure;
   - ``repeat``: the same call twice gives bit-identical outputs (and gradients);
   - ``causality``: replacing every token after t leaves the outputs at tokens <= t bit-identical.
2. Timings of ours and fla (``benchmarks.cases.bench_case``: same inputs, oracle-gated, do_bench medians) on
   ``--shapes``; a shape is skipped once ``--budget-s`` seconds have passed, so the call ends in time even when
   fla autotunes for minutes (the default shapes share H, so fla tunes once).
Writes ``gpu_check.jsonl``, ``gpu_check.md`` (and plots when matplotlib is there) under --out, default $OUT,
and prints a short summary last. Exit code: 0 all checks passed, 1 a check failed, 2 no CUDA GPU.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks import model, report, tune_cache
from benchmarks.cases import TORCH_DTYPES, bench_case, describe
from benchmarks.checks import BWD_TOL, FWD_TOL, passes
from benchmarks.cli import JsonlWriter, csv_choice, fmt, log, positive_int, require_cuda
from benchmarks.impls import load_impls
from benchmarks.provenance import provenance
from benchmarks.suites import FLAG_SETS, parse_shape, resolve_flags
from benchmarks.timing import cuda_timer, measure_ceilings

DEFAULT_SHAPES = "B2-T8192-H32,B8-T2048-H32"
TOKEN_ARGS = ("q", "k", "v", "g", "beta")
GRAD_ARGS = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")
KIMI = {"gate": "raw", "use_gate_in_kernel": True, "lower_bound": -5.0, "use_beta_sigmoid_in_kernel": True,
        "use_qk_l2norm_in_kernel": True}
CAUSAL_TS = (0, 15, 16, 63, 64, 100, 150, 193, 198)


@dataclass(frozen=True)
class CheckCase:
    """A small correctness case: sizes, ``make_inputs`` options (``make``) and extra chunk_kda options (``call``)."""

    name: str
    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    seqlens: tuple[int, ...] | None = None
    make: dict = field(default_factory=dict)
    call: dict = field(default_factory=dict)

    def inputs(self, dtype: str, device: torch.device, seed: int) -> dict:
        """chunk_kda kwargs in ``dtype`` (``bf16``/``fp16``/``fp32``), none requiring grad."""
        from reference.harness import make_inputs

        kwargs = make_inputs(self.B, self.T, self.H, self.HV, self.K, self.V, dtype=TORCH_DTYPES[dtype],
                             device=device, seqlens=list(self.seqlens) if self.seqlens else None, seed=seed,
                             **self.make)
        kwargs.update(self.call)
        return kwargs


CHECK_CASES = (
    CheckCase("fixed-pregated", 2, 200, 4, 4, 128, 128,
              make={"gate": "logsigmoid", "use_qk_l2norm_in_kernel": True, "output_final_state": True}),
    CheckCase("gva-kimi", 2, 200, 2, 4, 128, 64, make={**KIMI, "output_final_state": True},
              call={"safe_gate": True}),
    CheckCase("varlen-h0-empty-seq", 1, 232, 4, 4, 128, 128, seqlens=(37, 0, 130, 64, 1),
              make={"gate": "logsigmoid", "initial_state": True, "output_final_state": True}),
    CheckCase("varlen-gva-vfirst-kimi", 1, 193, 2, 4, 64, 64, seqlens=(100, 29, 64),
              make={**KIMI, "initial_state": True, "state_v_first": True, "output_final_state": True},
              call={"safe_gate": True}),
    CheckCase("softplus-gate-negeig", 1, 130, 2, 2, 64, 128,
              make={"gate": "raw", "use_gate_in_kernel": True, "use_beta_sigmoid_in_kernel": True,
                    "allow_neg_eigval": True}),
    CheckCase("strong-gate-bt32", 1, 160, 2, 2, 128, 128, make={"gate": "strong"}, call={"chunk_size": 32}),
    # head dims under 32: tiles padded and masked (16-wide tiles crashed the 16-bit products on sm_90)
    CheckCase("small-heads-k16-v20", 1, 100, 2, 4, 16, 20,
              make={**KIMI, "initial_state": True, "output_final_state": True}, call={"safe_gate": True}),
)
_BY_NAME = {case.name: case for case in CHECK_CASES}
# (case, dtype) pairs; every case in bf16, a few in fp16 and fp32 (each pair compiles its own kernel variants)
ACCURACY_CHECKS = tuple((case, "bf16") for case in CHECK_CASES) + tuple(
    (_BY_NAME[name], dtype) for name, dtype in (("fixed-pregated", "fp16"), ("varlen-gva-vfirst-kimi", "fp16"),
                                                ("gva-kimi", "fp32"), ("strong-gate-bt32", "fp32"),
                                                ("small-heads-k16-v20", "fp16")))
REPEAT_CHECKS = ((_BY_NAME["gva-kimi"], "bf16"), (_BY_NAME["varlen-gva-vfirst-kimi"], "bf16"))
# safe_gate with a partly filled last chunk (T=200), varlen with an empty sequence, chunk 32 with strong gates
CAUSAL_CHECKS = ((_BY_NAME["gva-kimi"], "bf16"), (_BY_NAME["varlen-h0-empty-seq"], "bf16"),
                 (_BY_NAME["strong-gate-bt32"], "fp32"))

def grad_names(kwargs: dict) -> list[str]:
    """The floating-point tensor arguments a gradient is checked for."""
    return [n for n in GRAD_ARGS if isinstance(kwargs.get(n), torch.Tensor) and kwargs[n].is_floating_point()]


def forward_backward(fn, kwargs: dict, names: list[str], do: torch.Tensor, dht: torch.Tensor | None, *,
                     upcast: bool) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor], str | None]:
    """(o, final_state, grads, note): ``fn(**kwargs)`` on fresh leaves (fp64 copies with ``upcast``), then
    backward of o with ``do`` and of the final state with ``dht``. ``note`` says when the final state carries no
    gradient."""
    leaves = {n: kwargs[n].detach().to(torch.float64 if upcast else kwargs[n].dtype).clone().requires_grad_(True)
              for n in names}
    o, ht = fn(**{**kwargs, **leaves})
    outs, cotangents, note = [o], [do.to(o.dtype)], None
    if ht is not None and dht is not None:
        if ht.requires_grad:
            outs.append(ht)
            cotangents.append(dht.to(ht.dtype))
        else:
            note = "final_state does not require grad: dht not propagated"
    torch.autograd.backward(outs, cotangents)
    return o.detach(), None if ht is None else ht.detach(), {n: leaves[n].grad for n in names}, note


def compare(pairs: dict[str, tuple], tol: float) -> tuple[bool, dict, dict, str]:
    """rel RMSE and max-abs of each (actual, reference) pair; (passed, errors, max_abs, worst name)."""
    from reference.harness import max_abs, rel_rmse

    errors, maxabs = {}, {}
    for name, (actual, ref) in pairs.items():
        if actual is None or actual.shape != ref.shape or not bool(torch.isfinite(actual).all()):
            errors[name], maxabs[name] = float("nan"), float("nan")
            continue
        errors[name], maxabs[name] = float(rel_rmse(actual, ref)), float(max_abs(actual, ref))
    worst = max(errors, key=lambda n: float("inf") if errors[n] != errors[n] else errors[n])
    return all(passes(e, tol) for e in errors.values()), errors, maxabs, worst


def check_row(check: str, case: str, dtype: str, status: str, **fields) -> dict:
    return {"kind": "check", "check": check, "case": case, "dtype": dtype, "status": status, **fields}


def check_accuracy(impl, case: CheckCase, dtype: str, device: torch.device, seed: int) -> list[dict]:
    """``fwd`` and ``bwd`` rows of one case and dtype against the fp64 oracle."""
    from reference.kda import kda_recurrent

    kwargs = case.inputs(dtype, device, seed)
    names = grad_names(kwargs)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    do = torch.randn(case.B, case.T, case.HV, case.V, generator=gen, device=device).to(TORCH_DTYPES[dtype])
    final = kwargs.get("output_final_state", False)
    n_seqs = len(case.seqlens) if case.seqlens else case.B
    state = (case.V, case.K) if case.make.get("state_v_first") else (case.K, case.V)
    dht = torch.randn(n_seqs, case.HV, *state, generator=gen, device=device) if final else None
    ref_o, ref_ht, ref_grads, _ = forward_backward(kda_recurrent, kwargs, names, do, dht, upcast=True)
    rows = []
    try:
        with torch.no_grad():
            o, ht = impl(**kwargs)
        pairs = {"o": (o, ref_o)} | ({"final_state": (ht, ref_ht)} if final else {})
        passed, errors, maxabs, worst = compare(pairs, FWD_TOL[dtype])
        rows.append(check_row("fwd", case.name, dtype, "pass" if passed else "fail", rel_rmse=errors,
                              max_abs=maxabs, worst=worst, tol=FWD_TOL[dtype]))
    except Exception as exc:  # reported as a failed check
        rows.append(check_row("fwd", case.name, dtype, "error", reason=f"{type(exc).__name__}: {exc}"))
    try:
        _, _, grads, note = forward_backward(impl, kwargs, names, do, dht, upcast=False)
        passed, errors, maxabs, worst = compare({f"d{n}": (grads[n], ref_grads[n]) for n in names}, BWD_TOL[dtype])
        rows.append(check_row("bwd", case.name, dtype, "pass" if passed else "fail", rel_rmse=errors,
                              max_abs=maxabs, worst=worst, tol=BWD_TOL[dtype], reason=note))
    except NotImplementedError as exc:
        rows.append(check_row("bwd", case.name, dtype, "unsupported", reason=f"NotImplementedError: {exc}"))
    except Exception as exc:  # reported as a failed check
        rows.append(check_row("bwd", case.name, dtype, "error", reason=f"{type(exc).__name__}: {exc}"))
    return rows


def check_repeat(impl, case: CheckCase, dtype: str, device: torch.device, seed: int) -> dict:
    """Two identical calls give bit-identical o and final state (and gradients, when the backward exists)."""
    kwargs = case.inputs(dtype, device, seed)
    try:
        with torch.no_grad():
            first, second = impl(**kwargs), impl(**kwargs)
        same = all(a is b is None or (a is not None and b is not None and torch.equal(a, b))
                   for a, b in zip(first, second, strict=True))
        note = None
        names = grad_names(kwargs)
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        do = torch.randn(case.B, case.T, case.HV, case.V, generator=gen, device=device).to(TORCH_DTYPES[dtype])
        try:
            grads = [forward_backward(impl, kwargs, names, do, None, upcast=False)[2] for _ in range(2)]
            same = same and all(torch.equal(grads[0][n], grads[1][n]) for n in names)
        except NotImplementedError:
            note = "forward only: backward not implemented"
        return check_row("repeat", case.name, dtype, "pass" if same else "fail", reason=note)
    except Exception as exc:  # reported as a failed check
        return check_row("repeat", case.name, dtype, "error", reason=f"{type(exc).__name__}: {exc}")


def check_causality(impl, case: CheckCase, dtype: str, device: torch.device, seed: int) -> dict:
    """Outputs at tokens <= t are bit-identical when every input token after t is replaced."""
    try:
        kwargs = case.inputs(dtype, device, seed)
        other = case.inputs(dtype, device, seed + 1)
        broken = {}
        with torch.no_grad():
            o, _ = impl(**kwargs)
            for t in (t for t in CAUSAL_TS if t < case.T - 1):
                perturbed = dict(kwargs)
                for name in TOKEN_ARGS:
                    x = kwargs[name].clone()
                    x[:, t + 1:] = other[name][:, t + 1:]
                    perturbed[name] = x
                o2, _ = impl(**perturbed)
                if not torch.equal(o2[:, :t + 1], o[:, :t + 1]):
                    broken[t] = float((o2[:, :t + 1].float() - o[:, :t + 1].float()).abs().max())
        reason = f"outputs <= t changed for t in {sorted(broken)} (max diff {max(broken.values()):.1e})" if broken \
            else None
        return check_row("causality", case.name, dtype, "fail" if broken else "pass", reason=reason,
                         ts=[t for t in CAUSAL_TS if t < case.T - 1])
    except Exception as exc:  # reported as a failed check
        return check_row("causality", case.name, dtype, "error", reason=f"{type(exc).__name__}: {exc}")


def describe_check(row: dict) -> str:
    head = f"check {row['check']:<9} {row['case']:<24} {row['dtype']}: {row['status'].upper()}"
    if "rel_rmse" in row:
        errs = " ".join(f"{n} {e:.1e}" for n, e in row["rel_rmse"].items())
        head += f" (tol {row['tol']:.0e}) {errs}"
    return head + (f" | {row['reason']}" if row.get("reason") else "")


def run_checks(impl, device: torch.device, seed: int, writer: JsonlWriter, deadline: float) -> list[dict]:
    """Every check in order; those not started before ``deadline`` (a perf_counter time) are rows 'skipped'."""
    rows = []
    plan = ([("accuracy", case, dtype) for case, dtype in ACCURACY_CHECKS]
            + [("repeat", case, dtype) for case, dtype in REPEAT_CHECKS]
            + [("causality", case, dtype) for case, dtype in CAUSAL_CHECKS])
    run_one = {"accuracy": lambda c, d: check_accuracy(impl, c, d, device, seed),
               "repeat": lambda c, d: [check_repeat(impl, c, d, device, seed)],
               "causality": lambda c, d: [check_causality(impl, c, d, device, seed)]}
    for kind, case, dtype in plan:
        if time.perf_counter() > deadline:
            new = [check_row(k, case.name, dtype, "skipped", reason="time budget (--check-budget-s) spent")
                   for k in (("fwd", "bwd") if kind == "accuracy" else (kind,))]
        else:
            new = run_one[kind](case, dtype)
        writer.write(new)
        rows.extend(new)
        for row in new:
            log(describe_check(row))
    return rows


def checks_markdown(rows: list[dict]) -> str:
    body = []
    for row in rows:
        errors = row.get("rel_rmse") or {}
        worst = row.get("worst")
        body.append([report.cell(row["check"]), report.cell(row["case"]), report.cell(row["dtype"]),
                     report.cell(row["status"]), report.cell(worst),
                     report.cell(errors.get(worst) if worst else None, ".1e"), report.cell(row.get("tol"), ".0e"),
                     report.cell(" ".join(f"{n}={e:.1e}" for n, e in errors.items()) or row.get("reason"))])
    headers = ["check", "case", "dtype", "status", "worst", "rel RMSE", "tol", "details"]
    return markdown_table(headers, body)


def write_markdown(path: Path, checks: list[dict], bench: list[dict], notes: list[str]) -> None:
    """gpu_check.md: the checks table, then the benchmark report of the timed rows."""
    path.write_text("# gpu_check\n\n## Checks (ours vs fp64 oracle)\n\n" + checks_markdown(checks) + "\n\n"
                    + (report.render_markdown(bench, notes) if bench else "No timings.\n"))


def markdown_table(headers: list[str], body: list[list[str]]) -> str:
    return report.markdown_table(headers, body) if body else "(none)"


def summary(prov: dict, checks: list[dict], bench: list[dict], files: list[Path]) -> str:
    """The short summary printed last."""
    lines = [f"==== gpu_check summary: {prov.get('gpu')} | torch {prov.get('torch')} CUDA {prov.get('cuda')} | "
             f"triton {prov.get('triton')} | fla {prov.get('fla')} | git {str(prov.get('git_sha'))[:12]} ===="]
    if checks:
        counts = {kind: Counter(r["status"] for r in checks if r["check"] == kind)
                  for kind in ("fwd", "bwd", "repeat", "causality")}
        lines.append("checks: " + "; ".join(f"{kind} " + ", ".join(f"{n} {s}" for s, n in sorted(c.items()))
                                             for kind, c in counts.items() if c))
        bad = [r for r in checks if r["status"] in ("fail", "error")]
        lines.extend(f"  FAILED {describe_check(r)[6:]}"[:240] for r in bad[:10])
        if len(bad) > 10:
            lines.append(f"  ... and {len(bad) - 10} more failures (see gpu_check.md)")
    if bench:
        body = []
        for r in bench:
            time_ms = fmt(r.get("median_ms"), ".3f") if r.get("status") == "ok" else r.get("status")
            body.append([r["impl"], r["shape"], r["flags"], r["mode"], time_ms,
                         fmt(r.get("speedup_vs_fla"), ".2f"), fmt(r.get("tbps"), ".2f"),
                         fmt(r.get("pct_of_floor"), ".0f"), fmt(r.get("rel_rmse"), ".1e"),
                         fmt(r.get("warmup_fwdbwd_s") if r["mode"] == "fwdbwd" else r.get("warmup_fwd_s"), ".1f")])
        lines.append(markdown_table(["impl", "shape", "flags", "mode", "ms", "vs fla", "TB/s", "% floor", "rmse",
                                     "warm-up s"], body))
        if bench[0].get("autotune_cache", "fresh") != "fresh":
            lines.append(f"warm-up s: autotune cache {bench[0]['autotune_cache']}: fla's first calls tuned only the "
                         "kernels without a restored result")
    lines.append("files: " + ", ".join(str(f) for f in files))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else gpu-check-out)")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES,
                        help=f"timed shapes, comma-separated, e.g. B2-T8192-H32-HV64-K128-V128-bf16 "
                             f"(default {DEFAULT_SHAPES})")
    parser.add_argument("--modes", type=csv_choice(model.MODES), default=list(model.MODES),
                        help="fwd and/or fwdbwd (default: both)")
    parser.add_argument("--flags", type=csv_choice(tuple(FLAG_SETS)), default=["kimi"],
                        help=f"flag sets for the timings: {', '.join(FLAG_SETS)} (default: kimi)")
    parser.add_argument("--no-fla", action="store_true", help="time ours alone")
    parser.add_argument("--skip-checks", action="store_true", help="timings only")
    parser.add_argument("--skip-timing", action="store_true", help="checks only")
    parser.add_argument("--check-budget-s", type=float, default=240.0,
                        help="start no check after this many seconds from start (default 240)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no timed shape after this many seconds from start (default 420)")
    parser.add_argument("--tune-cache", type=Path, default=None,
                        help="folder of saved Triton autotuning results (benchmarks/tune_cache.py): restored before "
                             "the first call, updated at the end; rows record it, as first calls then skip tuning")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-ms", type=positive_int, default=50, help="do_bench warm-up in ms (default 50)")
    parser.add_argument("--rep-ms", type=positive_int, default=200, help="do_bench repetition in ms (default 200)")
    return parser


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        shapes = [parse_shape(text) for text in args.shapes.split(",") if text.strip()]
    except ValueError as exc:
        parser.error(f"--shapes: {exc}")
    message = require_cuda("benchmarks.gpu_check")
    if message is not None:
        print(message, file=sys.stderr, flush=True)
        return 2
    restored = tune_cache.restore(args.tune_cache) if args.tune_cache else 0
    out = args.out or Path(os.environ.get("OUT") or "gpu-check-out")
    jsonl = out / "gpu_check.jsonl"
    if jsonl.exists():
        jsonl.unlink()
    writer = JsonlWriter(jsonl)
    md = out / "gpu_check.md"
    device = torch.device("cuda")
    prov = provenance(device)
    log(f"GPU {prov['gpu']} (cc {prov['cc']}, {prov['sm_count']} SMs); torch {prov['torch']} CUDA {prov['cuda']}, "
        f"triton {prov['triton']}, fla {prov['fla']}; rows -> {jsonl}")
    impls = load_impls(["triton"] if args.no_fla or args.skip_timing else ["triton", "fla"])
    checks: list[dict] = []
    if not args.skip_checks:
        if isinstance(impls["triton"], str):
            checks = [check_row("import", "-", "-", "error", reason=impls["triton"])]
            writer.write(checks)
        else:
            log("== correctness checks (ours vs fp64 oracle)")
            checks = run_checks(impls["triton"], device, args.seed, writer, t_start + args.check_budget_s)
            torch.cuda.empty_cache()
        write_markdown(md, checks, [], [])
    bench: list[dict] = []
    if not args.skip_timing:
        log("== timings")
        timer = cuda_timer(args.warmup_ms, args.rep_ms)
        context = {**prov, **measure_ceilings(timer, device),
                   "autotune_cache": f"{restored} results restored" if restored else "fresh"}
        for shape in shapes:
            for flags in resolve_flags(args.flags):
                elapsed = time.perf_counter() - t_start
                if elapsed > args.budget_s:
                    rows = [{"kind": "bench", "impl": name, "mode": mode, "suite": "gpu_check", "shape": shape.label,
                             "flags": flags.name, "dtype": shape.dtype, "status": "skipped",
                             "reason": f"time budget: {elapsed:.0f} s > --budget-s {args.budget_s:.0f}", **context}
                            for name in impls for mode in args.modes]
                else:
                    rows = bench_case("gpu_check", shape, flags, impls, args.modes, device=device, timer=timer,
                                      context=context, seed=args.seed)
                writer.write(rows)
                bench.extend(rows)
                for row in rows:
                    log(describe(row))
    if args.tune_cache:
        saved = tune_cache.save(args.tune_cache)
        log(f"autotune results: {restored} restored from, {saved} saved to {args.tune_cache}")
    notes = report.write_plots(bench, out) if bench else []
    write_markdown(md, checks, bench, notes)
    files = [jsonl, md] + sorted(out.glob("*.png"))
    print(summary(prov, checks, bench, files), flush=True)
    return 1 if any(r["status"] in ("fail", "error") for r in checks) else 0


if __name__ == "__main__":
    sys.exit(main())

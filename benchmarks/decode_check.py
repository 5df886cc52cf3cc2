"""One GPU call for the decode path: `fused_recurrent_kda` checked against the fp64 oracle and fla, the decode-step
timings against fla and the state-traffic floor, and a sweep of the decode launch configurations.

    python -m benchmarks.decode_check --out DIR [--slots 1024] [--batches 1,64,256] [--sweep-batches 64,256]
        [--no-sweep]

1. Checks (pass/fail rows):
   - ``decode-<dtype>``: one decode step, B64 H32 HV32 K=V=128, pool of --slots slots, Kimi flags, a padded
     entry (-1): o and the updated slots against the fp64 oracle within ``decode.TOL``, in 16-bit no worse than
     fla's fused_recurrent_kda_fwd on the same inputs (at most 1.05x its error, ties in output rounding), every
     other slot bit-identical;
   - ``spec-vs-fla``: a speculative step (varlen, per-token indices [N, 3], num_accepted_tokens), bf16: our pool
     and outputs against fla's (states within 1e-5, outputs within 1e-2: bf16 rounding);
   - ``cuda-graph``: a captured step replayed on new inputs equals the eager step bit for bit;
   - ``fast-path``: B64 steps with the plan kept per call signature (its first launch through Triton, then the
     compiled kernel launched directly) equal the step without plans bit for bit (o and pool);
   - ``backward-<dtype>``: fwd+bwd of B4 T16 H4 HV8 K=V=128 (Kimi flags, initial state): every gradient against
     the oracle (bf16 1e-2, fp32 1e-5).
2. Host time per call (``decode.host_us``) of ours, ours without plans (``triton-plain``) and fla at each batch,
   and cProfile listings of 200 B1 calls of ours and triton-plain (``host_profile_<impl>.txt``).
3. Timings (``benchmarks.decode.bench_shape``), B in --batches, H = HV = 32, K = V = 128, bf16, pool of --slots:
   ours, triton-plain and fla, do_bench and CUDA graph, and the targets: x1.2 over fla at every batch, at most 1.5x
   the floor at the largest batch.
4. Sweep: each candidate launch configuration of ours (``configs.recurrent_fwd_candidates``) at each batch of
   --sweep-batches, the table's choice marked.
Writes ``decode_check.md`` and ``decode_check.jsonl`` under --out (default $OUT), prints the markdown and then a
short summary. Exit code: 0 every check passed (targets are reported, not gated), 1 a check failed, 2 no CUDA GPU.
Sized for about three minutes on an H100 (fla's fused_recurrent_kda does not autotune).
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import os
import pstats
import sys
from pathlib import Path

import torch

from benchmarks import decode
from benchmarks.cli import csv_choice, log, positive_int, require_cuda
from benchmarks.provenance import provenance
from benchmarks.report import cell, markdown_table
from benchmarks.suites import DECODE_SLOTS, FLAG_SETS, Shape
from benchmarks.timing import cuda_timer, measure_ceilings

SPEEDUP_TARGET = 1.2
FLOOR_TARGET = 1.5
BWD_TOL = {"bf16": 1e-2, "fp32": 1e-5}
GRAD_ARGS = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")


def _check(name: str, passed: bool, detail: str) -> dict:
    log(f"check {name}: {'pass' if passed else 'FAIL'}: {detail}")
    return {"kind": "check", "name": name, "passed": bool(passed), "detail": detail}


def check_decode(dtype: str, slots: int, device: torch.device) -> dict:
    from reference.harness import rel_rmse
    from reference.kda import kda_recurrent

    shape = Shape(B=64, T=1, H=32, HV=32, dtype=dtype)
    inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], device, seed=3)
    pool, idx = decode.make_pool(shape, slots, device, seed=3)
    errors = {name: decode.check_step(decode.STEPS[name], inputs, pool, idx) for name in decode.STEPS}
    ours, fla = errors["triton"], errors["fla"]
    # a padded entry (fla reads slot -1, outside the pool, so only ours runs it): zero start, no write
    padded = idx.clone()
    padded[5] = -1
    live = padded >= 0
    work = pool.clone()
    o, _ = decode.ours(inputs, work, padded)
    h0 = torch.where(live[:, None, None, None], pool[padded.long().clamp(min=0)], 0.0)
    ref_o, ref_ht = kda_recurrent(**{**inputs, "output_final_state": True}, initial_state=h0)
    others = torch.ones(slots, dtype=torch.bool, device=device)
    others[padded.long()[live]] = False
    pad_err = max(rel_rmse(o, ref_o), rel_rmse(work[padded.long()[live]], ref_ht[live]))
    untouched = ours["untouched_equal"] and bool(torch.equal(work[others], pool[others]))
    tol = decode.TOL[dtype]
    ok = max(ours["rel_rmse"], ours["rel_rmse_state"], pad_err) <= tol and untouched
    if dtype != "fp32":
        ok = ok and ours["rel_rmse"] <= 1.05 * fla["rel_rmse"] and ours["rel_rmse_state"] <= 1.05 * fla[
            "rel_rmse_state"]
    return _check(f"decode-{dtype}", ok, f"ours o {ours['rel_rmse']:.2e} slots {ours['rel_rmse_state']:.2e}; fla o "
                  f"{fla['rel_rmse']:.2e} slots {fla['rel_rmse_state']:.2e}; with a padded entry {pad_err:.2e}; "
                  f"untouched slots equal: {untouched}")


def check_spec_vs_fla(device: torch.device) -> dict:
    from reference.harness import make_inputs, rel_rmse

    lengths, HV = [3, 1, 2, 3], 32
    d = make_inputs(1, sum(lengths), 32, HV, 128, 128, dtype=torch.bfloat16, device=device, seqlens=lengths,
                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                    use_beta_sigmoid_in_kernel=True, gate="raw", seed=4)
    d.pop("cu_seqlens_cpu")
    pool = torch.randn(16, HV, 128, 128, device=device)
    idx = torch.arange(12, dtype=torch.int32, device=device).reshape(4, 3)
    acc = torch.tensor([2, 1, 3, 1], dtype=torch.int32, device=device)
    pools = {name: pool.clone() for name in ("triton", "fla")}
    outs = {}
    for name, pl in pools.items():
        kw = dict(initial_state=pl, ssm_state_indices=idx, num_accepted_tokens=acc, inplace_final_state=True)
        if name == "triton":
            from triton_kda import fused_recurrent_kda

            outs[name] = fused_recurrent_kda(**d, **kw)[0]
        else:
            from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

            outs[name] = fused_recurrent_kda_fwd(**d, **kw)[0]
    err_pool, err_o = rel_rmse(pools["triton"], pools["fla"]), rel_rmse(outs["triton"], outs["fla"])
    return _check("spec-vs-fla", err_pool <= 1e-5 and err_o <= 1e-2,
                  f"pool vs fla {err_pool:.2e} (<= 1e-5), o vs fla {err_o:.2e} (<= 1e-2)")


def check_cuda_graph(slots: int, device: torch.device) -> dict:
    shape = Shape(B=64, T=1, H=32, HV=32)
    static = decode.step_inputs(shape, FLAG_SETS["kimi"], device, seed=5)
    pool, idx = decode.make_pool(shape, slots, device, seed=5)
    graph_pool = pool.clone()
    out = torch.empty(shape.B, 1, shape.HV, shape.V, dtype=torch.bfloat16, device=device)
    from triton_kda import fused_recurrent_kda

    def step(p):
        return fused_recurrent_kda(**static, initial_state=p, ssm_state_indices=idx, inplace_final_state=True,
                                   out=out)

    graph = decode.capture_graph(lambda: step(graph_pool))
    fresh = decode.step_inputs(shape, FLAG_SETS["kimi"], device, seed=6)
    graph_pool.copy_(pool)  # the warm-up and the capture stepped it
    for name in decode.TOKEN_ARGS:
        static[name].copy_(fresh[name])
    graph.replay()
    o_graph = out.clone()
    o_eager, _ = decode.ours(static, pool, idx)  # the new tokens, the captured gate parameters
    torch.cuda.synchronize()
    same = bool(torch.equal(o_graph, o_eager)) and bool(torch.equal(graph_pool, pool))
    return _check("cuda-graph", same, f"replay on new inputs equals the eager step bit for bit: {same}")


def check_fast_path(slots: int, device: torch.device) -> dict:
    from triton_kda import decode as kda_decode

    shape = Shape(B=64, T=1, H=32, HV=32)
    inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], device, seed=9)
    pool, idx = decode.make_pool(shape, slots, device, seed=9)
    kda_decode.clear_plans()
    plain, same = None, True
    for step in (decode.ours_plain, decode.ours, decode.ours, decode.ours):
        work = pool.clone()
        o, _ = step(inputs, work, idx)
        if plain is None:
            plain = (o, work)
        else:
            same = same and bool(torch.equal(o, plain[0])) and bool(torch.equal(work, plain[1]))
        del work
    direct = any(plan.runners for plan in kda_decode._PLANS.values())
    return _check("fast-path", same and direct, f"3 steps with a kept plan equal the step without plans bit for bit: "
                  f"{same}; the compiled kernel was launched directly: {direct}")


def check_backward(dtype: str, device: torch.device) -> dict:
    from reference.harness import make_inputs, rel_rmse
    from reference.kda import kda_recurrent
    from triton_kda import fused_recurrent_kda

    d = make_inputs(4, 16, 4, 8, 128, 128, dtype=decode.TORCH_DTYPES[dtype], device=device, initial_state=True,
                    output_final_state=True, requires_grad=True, seed=7, **FLAG_SETS["kimi"].make_kwargs)
    names = [n for n in GRAD_ARGS if n in d]
    o, ht = fused_recurrent_kda(**d)
    gen = torch.Generator(device=device).manual_seed(8)
    do, dht = (torch.randn(t.shape, generator=gen, device=device, dtype=torch.float64) for t in (o, ht))
    grads = torch.autograd.grad([o, ht], [d[n] for n in names], [do.to(o.dtype), dht.float()])
    ref = {n: (t.detach().double().requires_grad_(n in names) if isinstance(t, torch.Tensor) and
               t.is_floating_point() else t) for n, t in d.items()}
    ro, rht = kda_recurrent(**ref)
    rgrads = torch.autograd.grad([ro, rht], [ref[n] for n in names], [do.to(o.dtype).double(), dht.float().double()])
    errors = {n: rel_rmse(a, b) for n, a, b in zip(names, grads, rgrads, strict=True)}
    worst = max(errors, key=errors.get)
    return _check(f"backward-{dtype}", errors[worst] <= BWD_TOL[dtype],
                  f"worst d{worst} {errors[worst]:.2e} (tol {BWD_TOL[dtype]:.0e}); "
                  + ", ".join(f"d{n} {e:.1e}" for n, e in errors.items()))


def host_times(batches: list[int], slots: int, device: torch.device, out: Path) -> list[dict]:
    """Rows (kind "host") of the host microseconds per call of each decode step at each batch; writes the cProfile
    listings of 200 B1 calls of ours with and without plans under `out`."""
    rows = []
    for B in batches:
        shape = Shape(B=B, T=1, H=32, HV=32)
        inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], device)
        pool, idx = decode.make_pool(shape, slots, device)
        row = {"kind": "host", "B": B}
        for name, step in decode.STEPS.items():
            row[f"{name}_us"] = decode.host_us(functools.partial(step, inputs, pool, idx), device)
        log(f"host B{B}: " + ", ".join(f"{name} {row[f'{name}_us']:.1f} us" for name in decode.STEPS))
        rows.append(row)
        if B == 1:
            for name in ("triton", "triton-plain"):
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(200):
                    decode.STEPS[name](inputs, pool, idx)
                prof.disable()
                torch.cuda.synchronize(device)
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
                out.mkdir(parents=True, exist_ok=True)
                (out / f"host_profile_{name}.txt").write_text(text.getvalue())
        del pool
        torch.cuda.empty_cache()
    return rows


def sweep(batches: list[int], slots: int, timer, device: torch.device) -> list[dict]:
    from triton_kda.configs import arch_of, recurrent_fwd_candidates, recurrent_fwd_config, sm_count

    rows = []
    for B in batches:
        shape = Shape(B=B, T=1, H=32, HV=32)
        inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], device)
        pool, idx = decode.make_pool(shape, slots, device)
        table = recurrent_fwd_config(arch_of(device), 128, 128, B * 32, sm_count(device))
        for cfg in recurrent_fwd_candidates(arch_of(device), 128, 128):
            row = {"kind": "sweep", "B": B, "BV": cfg.BV, "num_warps": cfg.num_warps, "table": cfg == table,
                   "median_ms": None, "graph_ms": None, "reason": None}
            rows.append(row)
            try:
                with decode.forced_config(cfg):
                    result = decode.check_step(decode.ours, inputs, pool, idx)
                    if max(result["rel_rmse"], result["rel_rmse_state"]) > decode.TOL["bf16"]:
                        row["reason"] = f"wrong result: {result}"
                        continue
                    step = functools.partial(decode.ours, inputs, pool, idx)
                    row["median_ms"] = timer(step)[0]
                    row["graph_ms"] = decode.graph_ms(step)
            except Exception as exc:  # a configuration that does not compile or run here is a row, not a crash
                row["reason"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log(f"sweep B{B} BV{cfg.BV} warps{cfg.num_warps}{' (table)' if row['table'] else ''}: "
                f"{cell(row['median_ms'] and row['median_ms'] * 1e3, '.1f')} us, graph "
                f"{cell(row['graph_ms'] and row['graph_ms'] * 1e3, '.1f')} us {row['reason'] or ''}")
        del pool
        torch.cuda.empty_cache()
    return rows


def targets(rows: list[dict]) -> list[str]:
    """Lines saying whether the decode rows meet the targets."""
    ours = {r["B"]: r for r in rows if r["impl"] == "triton" and r["status"] == "ok"}
    lines = []
    for B, r in sorted(ours.items()):
        for key, label in (("speedup_vs_fla", "do_bench"), ("graph_speedup_vs_fla", "graph")):
            value = r.get(key)
            verdict = "met" if value is not None and value >= SPEEDUP_TARGET else "NOT met"
            lines.append(f"- B{B} fla / ours ({label}) {cell(value, '.2f')} >= {SPEEDUP_TARGET}: {verdict}")
    if ours:
        B = max(ours)
        ratio = ours[B].get("floor_ratio")
        verdict = "met" if ratio is not None and ratio <= FLOOR_TARGET else "NOT met"
        lines.append(f"- B{B} ours / floor (do_bench) {cell(ratio, '.2f')} <= {FLOOR_TARGET}: {verdict}")
    return lines


def render(prov: dict, checks: list[dict], host_rows: list[dict], rows: list[dict], sweep_rows: list[dict]) -> str:
    parts = [f"# Decode check: {prov.get('gpu')} (cc {prov.get('cc')}), torch {prov.get('torch')}, triton "
             f"{prov.get('triton')}, fla {prov.get('fla')}, git {str(prov.get('git_sha'))[:12]}, "
             f"{prov.get('time_utc')}", "",
             f"copy bandwidth {cell(rows[0].get('copy_tbps') if rows else None, '.2f')} TB/s", "", "## Checks", "",
             markdown_table(["check", "result", "detail"],
                            [[c["name"], "pass" if c["passed"] else "FAIL", cell(c["detail"])] for c in checks])]
    if host_rows:
        names = list(decode.STEPS)
        parts += ["", "## Host time per call (us; calls issued back to back, median of rounds)", "",
                  markdown_table(["B", *names], [[str(r["B"]), *(cell(r.get(f"{n}_us"), ".1f") for n in names)]
                                                 for r in host_rows], set(range(len(names) + 1)))]
    parts += ["", "## Decode step (Kimi flags, bf16, pool of slots, T = 1)", "", decode.markdown(rows), "",
              *targets(rows)]
    if sweep_rows:
        body = [[str(r["B"]), str(r["BV"]), str(r["num_warps"]), "yes" if r["table"] else "",
                 cell(r["median_ms"] and r["median_ms"] * 1e3, ".1f"),
                 cell(r["graph_ms"] and r["graph_ms"] * 1e3, ".1f"), cell(r["reason"])] for r in sweep_rows]
        parts += ["", "## Launch configurations of ours (do_bench / graph, us)", "",
                  markdown_table(["B", "BV", "warps", "table", "do_bench us", "graph us", "note"], body, {0, 1, 2,
                                                                                                          4, 5})]
    return "\n".join(parts) + "\n"


def summary(checks: list[dict], host_rows: list[dict], rows: list[dict], sweep_rows: list[dict]) -> str:
    """The few lines printed last: checks, host time, do_bench and graph times against fla, the sweep's best."""
    def us(ms):
        return cell(ms and ms * 1e3, ".1f")

    failed = [c["name"] for c in checks if not c["passed"]]
    lines = ["Summary", f"- checks: {'FAILED ' + ', '.join(failed) if failed else f'all {len(checks)} pass'}"]
    for r in host_rows:
        lines.append(f"- host us/call B{r['B']}: " + ", ".join(f"{n} {cell(r.get(f'{n}_us'), '.1f')}"
                                                               for n in decode.STEPS))
    ok = {(r["impl"], r["B"]): r for r in rows if r["status"] == "ok"}
    for B in sorted({r["B"] for r in rows}):
        got = {n: ok.get((n, B), {}) for n in decode.STEPS}
        ours = got["triton"]
        times = {key: "/".join(us(r.get(key)) for r in got.values()) for key in ("median_ms", "graph_ms")}
        lines.append(f"- B{B} {'/'.join(decode.STEPS)}: do_bench {times['median_ms']} us, graph {times['graph_ms']} "
                     f"us; fla/ours x{cell(ours.get('speedup_vs_fla'), '.2f')} (graph "
                     f"x{cell(ours.get('graph_speedup_vs_fla'), '.2f')}), ours/floor "
                     f"x{cell(ours.get('floor_ratio'), '.2f')}")
    for B in sorted({r["B"] for r in sweep_rows}):
        timed = [r for r in sweep_rows if r["B"] == B and r["graph_ms"] is not None]
        table = next((r for r in timed if r["table"]), None)
        if not timed:
            continue
        for key, label in (("graph_ms", "graph"), ("median_ms", "do_bench")):
            best = min(timed, key=lambda r: r[key])
            lines.append(f"- sweep B{B} ({label}): best BV{best['BV']} w{best['num_warps']} {us(best[key])} us; table "
                         + (f"BV{table['BV']} w{table['num_warps']} {us(table[key])} us" if table else "-"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "decode-check-out")),
                        help="folder for decode_check.md / .jsonl (default $OUT)")
    parser.add_argument("--slots", type=positive_int, default=DECODE_SLOTS, help="state pool slots (default 1024)")
    parser.add_argument("--batches", type=lambda s: [positive_int(x) for x in s.split(",")], default=[1, 64, 256],
                        help="decode batch sizes, comma-separated (default 1,64,256)")
    parser.add_argument("--impl", type=csv_choice(tuple(decode.STEPS)), default=list(decode.STEPS),
                        help=f"implementations to time (default {','.join(decode.STEPS)})")
    parser.add_argument("--sweep-batches", type=lambda s: [positive_int(x) for x in s.split(",")], default=[64, 256],
                        help="batch sizes of the launch-configuration sweep (default 64,256)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the launch-configuration sweep")
    args = parser.parse_args(argv)
    message = require_cuda("benchmarks.decode_check")
    if message is not None:
        print(message, file=sys.stderr)
        return 2
    device = torch.device("cuda")
    prov = provenance(device)
    timer = cuda_timer(25, 100)
    context = {**prov, **measure_ceilings(timer, device)}
    checks = [check_decode(dtype, args.slots, device) for dtype in ("bf16", "fp16", "fp32")]
    checks += [check_spec_vs_fla(device), check_cuda_graph(args.slots, device), check_fast_path(args.slots, device)]
    checks += [check_backward(dtype, device) for dtype in ("bf16", "fp32")]
    host_rows = host_times(args.batches, args.slots, device, args.out)
    rows = []
    for B in args.batches:
        rows += decode.bench_shape(Shape(B=B, T=1, H=32, HV=32), FLAG_SETS["kimi"], args.impl, timer, context,
                                   slots=args.slots, device=device)
        for row in rows[-len(args.impl):]:
            log(decode.describe(row))
        torch.cuda.empty_cache()
    sweep_rows = [] if args.no_sweep else sweep(args.sweep_batches, args.slots, timer, device)
    text = render(prov, checks, host_rows, rows, sweep_rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_check.md").write_text(text)
    with (args.out / "decode_check.jsonl").open("w") as f:
        for row in [*checks, *host_rows, *rows, *sweep_rows]:
            f.write(json.dumps(row) + "\n")
    print(text)
    print(summary(checks, host_rows, rows, sweep_rows))
    return 0 if all(c["passed"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

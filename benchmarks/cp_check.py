"""One GPU call for intra-card CP (triton_kda/state_cp.py): checks, then timings against our serial path.

    python -m benchmarks.cp_check [--out DIR] [--budget-s 300]

1. Checks at a small slice (B1 T2048 H8 K=V=128, Kimi flags with lower_bound -0.01 so a piece's map does not decay
   to 0, h0 and dht, the split forced to 8 pieces): bf16 forward and backward, CP vs serial vs the fp64 oracle;
   fp32 forward, CP vs serial; a varlen call with cu_seqlens_cpu under torch's sync debug mode (no host sync).
2. Timings, `triton.testing.do_bench` medians, bf16, K = V = 128, Kimi flags (lower_bound -5, safe_gate), for
   B1 H8 T65536, B8 H32 T2048, B1 H16 T32768 and varlen [131072 + 16 x 1024] H8: the whole chunk_kda call, forward
   (no_grad) and forward + backward (grads of q, k, v, g, beta), serial (TRITON_KDA_INTRACARD_CP=0) vs auto, with
   the planner's choice; then at the first shape the intra stage alone (the chunk-parallel part that CP does not
   change: serial forward / intra forward bounds what any state path can give), the state stage alone (state_fwd,
   state_bwd) and a piece-length sweep.
3. fla beside ours (when fla is installed), at B1 H8 T65536 (as one varlen sequence) and the varlen batch: forward
   under torch.inference_mode with FLA_INTRACARD_CP=0 and =1 (fla's CP takes only inference-mode varlen calls), and
   fwd+bwd. Rows not started within --budget-s are left out.
Writes cp_check.md under --out (default $OUT) after every row and prints it at the end.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

from reference.harness import environ

KIMI = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
LEAVES = ("q", "k", "v", "g", "beta")
ALL_LEAVES = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")
BT = 64
# (name, B, T, H, seqlens)
SHAPES = (
    ("B1-H8-T65536", 1, 65536, 8, None),
    ("B8-H32-T2048", 8, 2048, 32, None),
    ("B1-H16-T32768", 1, 32768, 16, None),
    ("varlen-131072+16x1024-H8", 1, 131072 + 16 * 1024, 8, (131072,) + (1024,) * 16),
)
SWEEP_PIECE_CHUNKS = (16, 32, 64, 128)
FLA_SHAPES = ("B1-H8-T65536", "varlen-131072+16x1024-H8")


def cp_env(mode: str, piece_chunks: int | None = None):
    """Set TRITON_KDA_INTRACARD_CP (and _CHUNKS) for the block."""
    from triton_kda.state_cp import ENV_MODE, ENV_PIECE_CHUNKS

    return environ({ENV_MODE: mode, ENV_PIECE_CHUNKS: str(piece_chunks) if piece_chunks else None})


def call_fns(chunk_kda, d: dict, do: torch.Tensor, fwd_mode=torch.no_grad):
    """(fwd, fwdbwd): one `chunk_kda(**d)` call under `fwd_mode`, and one with the gradients of its LEAVES for `do`."""
    leaves = [d[n] for n in LEAVES]

    def fwd():
        with fwd_mode():
            chunk_kda(**d, chunk_size=BT)

    def fwdbwd():
        o, _ = chunk_kda(**d, chunk_size=BT)
        torch.autograd.grad(o, leaves, do)

    return fwd, fwdbwd


def make(B, T, H, seqlens, dtype, *, lower_bound=-5.0, state=False, grad=False, seed=0) -> dict:
    """chunk_kda kwargs: Kimi flags, K = V = 128, HV = H; q, k, v, g, beta (and h0, A_log, dt_bias) leaves with grad."""
    from reference.harness import make_inputs

    d = make_inputs(B, T, H, H, 128, 128, dtype=dtype, device="cuda", seqlens=list(seqlens) if seqlens else None,
                    gate="raw", lower_bound=lower_bound, initial_state=state, output_final_state=state, seed=seed,
                    **KIMI)
    d["safe_gate"] = True
    if grad:
        for n in ALL_LEAVES if state else LEAVES:
            d[n].requires_grad_(True)
    return d


def run_call(d: dict, *, backward: bool, seed: int = 1) -> dict:
    """Outputs (and gradients of sum(o * do) + sum(ht * dht)) of one chunk_kda call, detached."""
    from triton_kda import chunk_kda

    o, ht = chunk_kda(**d, chunk_size=BT)
    out = {"o": o.detach()}
    if ht is not None:
        out["final_state"] = ht.detach()
    if backward:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        outs, cots = [o], [torch.randn(o.shape, generator=gen, device="cuda").to(o.dtype)]
        if ht is not None:
            outs.append(ht)
            cots.append(torch.randn(ht.shape, generator=gen, device="cuda"))
        names = [n for n in ALL_LEAVES if isinstance(d.get(n), torch.Tensor) and d[n].requires_grad]
        out.update({f"d{n}": g for n, g in zip(names, torch.autograd.grad(outs, [d[n] for n in names], cots),
                                              strict=True)})
    return out


def oracle(d: dict, *, backward: bool, seed: int = 1) -> dict:
    """The same outputs from the fp64 recurrent oracle."""
    from reference.kda import kda_recurrent

    names = [n for n in ALL_LEAVES if isinstance(d.get(n), torch.Tensor) and d[n].requires_grad]
    ref = {k: v for k, v in d.items() if k != "safe_gate"}
    ref.update({n: d[n].detach().double().requires_grad_(backward) for n in names})
    o, ht = kda_recurrent(**ref)
    out = {"o": o.detach(), "final_state": ht.detach()}
    if backward:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        do = torch.randn(o.shape, generator=gen, device="cuda").to(d["v"].dtype).double()
        dht = torch.randn(ht.shape, generator=gen, device="cuda").double()
        grads = torch.autograd.grad([o, ht], [ref[n] for n in names], [do, dht])
        out.update({f"d{n}": g for n, g in zip(names, grads, strict=True)})
    return out


def checks(rows: list) -> bool:
    """Correctness rows (check, dtype, tensor, CP vs serial, CP vs fp64, serial vs fp64, tol, status)."""
    from reference.harness import rel_rmse

    ok = True
    for dtype, backward, tol_fp64, tol_serial in ((torch.bfloat16, True, (1e-2, 3e-2), 2e-2),
                                                  (torch.float32, False, (1e-4, 1e-4), 1e-5)):
        d = make(1, 2048, 8, None, dtype, lower_bound=-0.01, state=True, grad=backward)
        with cp_env("0"):
            serial = run_call(d, backward=backward)
        with cp_env("1", 4):
            cp = run_call(d, backward=backward)
        ref = oracle(d, backward=backward)
        for name, r in ref.items():
            tol = tol_fp64[0] if name in ("o", "final_state") else tol_fp64[1]
            e_cs, e_c, e_s = rel_rmse(cp[name], serial[name]), rel_rmse(cp[name], r), rel_rmse(serial[name], r)
            good = e_c <= tol and e_cs <= tol_serial
            ok &= good
            rows.append(["8 pieces", str(dtype).removeprefix("torch."), name, f"{e_cs:.1e}", f"{e_c:.1e}",
                         f"{e_s:.1e}", f"{tol:.0e} / {tol_serial:.0e}", "pass" if good else "FAIL"])
    d = make(1, 1900, 8, (1500, 100, 300), torch.bfloat16, seed=3)
    with cp_env("1", 5), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_call(d, backward=False)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # torch's warning per synchronizing operation (its one-off "prototype feature" notice is not one)
    syncs = [str(w.message)[:80] for w in caught if "called a synchronizing" in str(w.message)]
    ok &= not syncs
    rows.append(["varlen + cu_seqlens_cpu, first call", "bfloat16", "host syncs", str(len(syncs)), "-", "-", "0",
                 "pass" if not syncs else "FAIL: " + "; ".join(syncs[:2])])
    return ok


def timer(fn) -> float:
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    return float(do_bench(fn, warmup=50, rep=400, return_mode="median"))


def plan_text(B, T, H, seqlens) -> str:
    """The planner's choice for this shape under the current environment."""
    from triton_kda.state_cp import plan_pieces

    lens = tuple(seqlens) if seqlens else (T,) * B
    p = plan_pieces(lens, BT, H, 128, 128, 2, torch.device("cuda"))
    if p is None:
        return "serial"
    return f"{p.N} pieces of {int(p.chunk_offsets[1] - p.chunk_offsets[0])} chunks"


def serial_vs_auto(fn, B, T, H, seqlens) -> tuple[float, float, str]:
    """`fn`'s ms with intra-card CP off and on auto, and the auto plan (`plan_text`)."""
    with cp_env("0"):
        t_serial = timer(fn)
    with cp_env("auto"):
        t_cp = timer(fn)
        plan = plan_text(B, T, H, seqlens)
    return t_serial, t_cp, plan


def whole_call_rows(name, B, T, H, seqlens, rows: list) -> dict[str, tuple[float, float]]:
    """Whole-call rows, serial vs auto, forward and fwd+bwd; returns {mode: (serial ms, auto ms)}."""
    from triton_kda import chunk_kda

    d = make(B, T, H, seqlens, torch.bfloat16, grad=True)
    fwd, fwdbwd = call_fns(chunk_kda, d, torch.randn(B, T, H, 128, device="cuda", dtype=torch.bfloat16))
    times = {}
    for mode, fn in (("fwd", fwd), ("fwd+bwd", fwdbwd)):
        t_serial, t_cp, plan = serial_vs_auto(fn, B, T, H, seqlens)
        rows.append([name, "whole call", mode, plan, f"{t_serial:.3f}", f"{t_cp:.3f}", f"{t_serial / t_cp:.2f}"])
        times[mode] = (t_serial, t_cp)
    return times


def state_rows(name, B, T, H, seqlens, rows: list, deadline: float) -> float:
    """The intra stage alone (no CP in it), then the state stage alone (forward as in inference, reverse as in
    training), serial vs auto, then a sweep. Returns the intra stage's forward ms."""
    from triton_kda.chunk_fwd import plan_chunks
    from triton_kda.intra import intra_fwd
    from triton_kda.state import state_bwd, state_fwd

    d = make(B, T, H, seqlens, torch.bfloat16)
    plan = plan_chunks(B, T, BT, torch.device("cuda"), d.get("cu_seqlens_cpu"))
    flat = {n: d[n].reshape(B * T, *d[n].shape[2:]).contiguous() for n in LEAVES}

    def run_intra():
        return intra_fwd(flat["q"], flat["k"], flat["v"], flat["g"], flat["beta"], d["A_log"], d["dt_bias"],
                         128 ** -0.5, plan, BT, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                         lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)

    intra = run_intra()
    t_intra = timer(run_intra)
    rows.append([name, "intra stage", "intra fwd", "(no CP)", f"{t_intra:.3f}", f"{t_intra:.3f}", "1.00"])
    do = torch.randn(B * T, H, 128, device="cuda", dtype=torch.bfloat16)
    fns = {
        "state fwd": lambda: state_fwd(intra, None, plan, BT, 128, output_final_state=True, state_v_first=False,
                                       store_h=False, store_v_new=False, h_dtype=torch.bfloat16),
        "state bwd": lambda: state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, do, None, plan, BT, 128,
                                       want_dh0=False, state_v_first=False, prec="tf32"),
    }
    for stage, fn in fns.items():
        t_serial, t_cp, plan_s = serial_vs_auto(fn, B, T, H, seqlens)
        rows.append([name, "state stage", stage, plan_s, f"{t_serial:.3f}", f"{t_cp:.3f}", f"{t_serial / t_cp:.2f}"])
        for L in SWEEP_PIECE_CHUNKS:
            if time.monotonic() > deadline:
                return t_intra
            with cp_env("1", L):
                t = timer(fn)
            rows.append([name, "state stage", stage, f"forced {L} chunks/piece", f"{t_serial:.3f}", f"{t:.3f}",
                         f"{t_serial / t:.2f}"])
    return t_intra


def fla_rows(name, B, T, H, seqlens, ours: dict[str, tuple[float, float]], rows: list) -> None:
    """fla's forward (inference mode, one varlen batch, FLA_INTRACARD_CP=0 and =1) and fwd+bwd beside ours (auto)."""
    from fla.ops.kda import chunk_kda as fla_chunk_kda

    d = make(B, T, H, seqlens or (T,) * B, torch.bfloat16, grad=True)
    d = d | {n: d[n].detach().reshape(1, B * T, *d[n].shape[2:]).requires_grad_(True) for n in LEAVES}
    fwd, fwdbwd = call_fns(fla_chunk_kda, d, torch.randn(1, B * T, H, 128, device="cuda", dtype=torch.bfloat16),
                           fwd_mode=torch.inference_mode)

    def row(mode, label, t, mine):
        rows.append([name, mode, label, f"{t:.3f}", f"{mine:.3f}", f"{t / mine:.2f}"])

    # fwd+bwd first: fla caches tensors derived from cu_seqlens, and ones made under inference_mode cannot be saved
    # for a backward later
    with environ({"FLA_INTRACARD_CP": "0"}):
        fwdbwd_ms = timer(fwdbwd)
    for cp in ("0", "1"):
        with environ({"FLA_INTRACARD_CP": cp}):
            row("fwd (inference)", "fla, FLA_INTRACARD_CP=" + cp, timer(fwd), ours["fwd"][1])
    row("fwd+bwd", "fla", fwdbwd_ms, ours["fwd+bwd"][1])


def table(headers, body) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])


def write(path: Path, check_rows, time_rows, fla_time_rows, notes) -> str:
    import triton

    import triton_kda

    props = torch.cuda.get_device_properties(0)

    text = "\n\n".join([
        "# Intra-card CP vs the serial state path",
        f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}, "
        f"triton_kda from {Path(triton_kda.__file__).parent}; "
        "bf16, K = V = 128, Kimi flags (l2norm, gate in kernel, safe_gate lower_bound -5, beta sigmoid), chunk 64; "
        "medians of triton.testing.do_bench (L2 flushed). serial = TRITON_KDA_INTRACARD_CP=0, CP = auto.",
        "## Checks (rel RMSE)",
        table(["check", "dtype", "tensor", "CP vs serial", "CP vs fp64", "serial vs fp64", "tol (fp64 / serial)",
               "status"], check_rows),
        "## Timings (ms)",
        table(["shape", "what", "mode", "plan (auto)", "serial ms", "CP ms", "speed-up"], time_rows),
        "## fla beside ours (ms; ours = auto)",
        table(["shape", "mode", "fla", "fla ms", "ours ms", "ours vs it"], fla_time_rows),
        *notes,
    ]) + "\n"
    path.write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cp_check", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=300.0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("cp_check: needs a CUDA GPU", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.budget_s
    out = Path(args.out) / "cp_check.md"
    check_rows, time_rows, fla_time_rows, notes = [], [], [], []
    t0 = time.monotonic()
    try:
        ok = checks(check_rows)
    except Exception:  # one device call: report the failure and still time what runs
        ok = False
        notes.append("checks raised:\n```\n" + traceback.format_exc()[-3000:] + "```")
    write(out, check_rows, time_rows, fla_time_rows, notes)
    print(f"checks {'passed' if ok else 'FAILED'} in {time.monotonic() - t0:.0f} s", flush=True)
    has_fla = importlib.util.find_spec("fla") is not None
    for i, (name, B, T, H, seqlens) in enumerate(SHAPES):
        if time.monotonic() > deadline:
            notes.append(f"{name}: not timed (budget spent)")
            continue
        t0 = time.monotonic()
        try:
            times = whole_call_rows(name, B, T, H, seqlens, time_rows)
            if i == 0:
                t_intra = state_rows(name, B, T, H, seqlens, time_rows, deadline)
                t_serial = times["fwd"][0]
                notes.append(f"{name}: the intra stage alone takes {t_intra:.3f} ms of the serial forward's "
                             f"{t_serial:.3f} ms, so no state path can make the forward more than "
                             f"{t_serial / t_intra:.2f}x faster than serial (Amdahl).")
            if has_fla and name in FLA_SHAPES and time.monotonic() < deadline:
                fla_rows(name, B, T, H, seqlens, times, fla_time_rows)
        except Exception:
            ok = False
            notes.append(f"{name} raised:\n```\n" + traceback.format_exc()[-3000:] + "```")
        write(out, check_rows, time_rows, fla_time_rows, notes)
        print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)
        torch.cuda.empty_cache()
    print(write(out, check_rows, time_rows, fla_time_rows, notes))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Context parallel over the GPUs of one host (triton_kda/cp.py): checks and timings from one torchrun launch.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc_per_node 2 -m benchmarks.cp_dist --out DIR [--fla] [--tune-cache DIR] [--budget-s 480]
    torchrun --nproc_per_node 2 -m benchmarks.cp_dist --smoke --out DIR   # tiny shapes (gloo + interpreter on CPU)
    ... -m benchmarks.cp_dist --timings-only ...                          # sections 2-4 only

NVLink multicast stays off: the three variables above are set again in every rank before the process group starts
(NCCL, PyTorch's symmetric memory and NVSHMEM read them there). Every rank runs every step, in the same order;
rank 0 writes cp_dist.md (and cp_dist.json) under --out after each section. W = the number of ranks (any).

1. Checks, Kimi flags (l2norm, gate in kernel with safe_gate, beta sigmoid), K = V = 128, chunk 64, bf16:
   a. T = 131072, H4, one sequence over the W ranks (contiguous), with an initial state and the final state:
      o and the final state of CP and of one GPU (ours, the whole sequence on every GPU) against the chunked fp64
      oracle (`reference.kda.kda_chunk`) at the full length; every gradient of CP against one GPU;
   b. T = 16384, varlen [5000, 0, 7000, 4384] (a sequence over several parts, an empty one), both layouts, weak
      gates (lower_bound -0.001, so the maps M of a part matter), h0 and final states: CP and one GPU, forward and
      every gradient, against the fp64 oracle's autograd;
   c. two CP forward + backward runs of (a): bit-identical outputs and gradients;
   d. a CP forward + backward with cu_seqlens_cpu under torch's sync debug mode: no host sync;
   e. a CP forward captured in a CUDA graph and replayed: equal to the eager call.
2. Timings, B1 H32 K = V = 128 bf16, Kimi flags (lower_bound -5), one sequence of T = 128K and 256K tokens in all
   (`--T 524288` for others):
   forward (no_grad) and forward + backward (grads of q, k, v, g, beta) on one GPU (the whole sequence on each GPU
   at once) and under CP (contiguous); medians of per-call device times (L2 flushed, ranks aligned by a barrier
   before each call; the slower rank's median), and the speed-up.
3. The collective's share: kernel times of one CP fwd+bwd by torch.profiler, per rank, split into NCCL (which
   includes waiting for the other ranks), the CP map and chain kernels, the state kernels and the rest; and the
   all-gather of one map buffer alone.
4. With --fla: fla 0.6.0's CP (its build_cp_context and chunk_kda(cp_context=...)) on the same GPUs and shapes,
   forward and fwd+bwd (fla autotunes for minutes per new shape: --tune-cache keeps its results between calls).
Sections not started within --budget-s are left out (the ranks agree on it).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
KIMI = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
TOKENS = ("q", "k", "v", "g", "beta")
SHARED = ("initial_state", "A_log", "dt_bias")  # one tensor on every rank: the ranks' gradients add up
BT = 64


@dataclass
class Sizes:
    check_T: int
    check_H: int
    grad_seqlens: tuple
    time_Ts: tuple
    time_H: int
    K: int
    dtype: torch.dtype
    reps: int


# the varlen batch (16800 tokens) splits into 2W equal parts for every W up to 8; the long ones are cut to a
# multiple of W where W does not divide them
FULL = Sizes(131072, 4, (5000, 0, 7000, 4800), (131072, 262144), 32, 128, torch.bfloat16, 10)
SMOKE = Sizes(256, 1, (100, 0, 60, 80), (128, 256), 2, 16, torch.float32, 2)


@dataclass
class Setup:
    rank: int
    W: int
    device: torch.device
    group: object
    sizes: Sizes


def fit(T: int, s: Setup) -> int:
    """T cut to a multiple of the number of ranks (contiguous parts)."""
    return T - T % s.W


def log(s: Setup, message: str) -> None:
    if s.rank == 0:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def agree(flag: bool, s: Setup) -> bool:
    """True only where every rank says True (a decision all ranks take together)."""
    t = torch.tensor([int(flag)], device=s.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=s.group)
    return bool(t.item())


def max_over_ranks(x: float, s: Setup) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=s.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=s.group)
    return float(t.item())


# ---- inputs, slices, runs


def make(s: Setup, T: int, H: int, *, seqlens=None, lower_bound=-5.0, state=False, seed=0) -> dict:
    """chunk_kda kwargs for the global batch (the same on every rank): Kimi flags, HV = H, K = V; leaves with grad."""
    from reference.harness import make_inputs

    z = s.sizes
    d = make_inputs(1, T, H, H, z.K, z.K, dtype=z.dtype, device=s.device, seqlens=list(seqlens or [T]),
                    gate="raw", lower_bound=lower_bound, initial_state=state, output_final_state=state, seed=seed,
                    **KIMI)
    d["safe_gate"] = True
    for n in (*TOKENS, *SHARED):
        if isinstance(d.get(n), torch.Tensor):
            d[n].requires_grad_(True)
    return d


def cotangents(d: dict, seed: int = 1):
    gen = torch.Generator(device=d["v"].device).manual_seed(seed)
    do = torch.randn(d["v"].shape, generator=gen, device=d["v"].device).to(d["v"].dtype)
    dht = None
    if d.get("output_final_state"):
        dht = torch.randn(d["initial_state"].shape, generator=gen, device=d["v"].device)
    return do, dht


def slots(s: Setup, layout: str) -> tuple:
    return (s.rank,) if layout == "contiguous" else (s.rank, 2 * s.W - 1 - s.rank)


def local(x: torch.Tensor, s: Setup, layout: str) -> torch.Tensor:
    """This rank's tokens of a [1, T, ...] tensor: its part(s) of the stream, concatenated."""
    parts = x.chunk(s.W * (2 if layout == "zigzag" else 1), dim=1)
    return torch.cat([parts[c] for c in slots(s, layout)], dim=1)


def full(x: torch.Tensor, s: Setup, layout: str) -> torch.Tensor:
    """The inverse of `local` (an all-gather): the [1, T, ...] tensor from every rank's slice."""
    out = torch.empty(s.W * x.shape[0], *x.shape[1:], device=x.device, dtype=x.dtype)
    dist.all_gather_into_tensor(out, x.contiguous(), group=s.group)  # the concatenated form (gloo takes only it)
    out = out.view(s.W, *x.shape)
    if layout == "contiguous":
        return torch.cat(list(out), dim=1)
    parts = [None] * (2 * s.W)
    for r in range(s.W):
        front, back = out[r].chunk(2, dim=1)
        parts[r], parts[2 * s.W - 1 - r] = front, back
    return torch.cat(parts, dim=1)


def run(d: dict, do, dht, *, backward: bool = True, **extra) -> dict:
    """o, the final state and the gradients of every leaf of one chunk_kda call, detached."""
    from triton_kda import chunk_kda

    names = [n for n in (*TOKENS, *SHARED) if isinstance(d.get(n), torch.Tensor) and d[n].requires_grad]
    with torch.set_grad_enabled(backward):
        o, ht = chunk_kda(**d, chunk_size=BT, **extra)
    out = {"o": o.detach()} | ({"final_state": ht.detach()} if ht is not None else {})
    if backward:
        outs, cots = [o], [do]
        if ht is not None:
            outs.append(ht)
            cots.append(dht)
        out |= {f"d{n}": g for n, g in zip(names, torch.autograd.grad(outs, [d[n] for n in names], cots),
                                           strict=True)}
    return out


def cp_inputs(d: dict, s: Setup, layout: str):
    """(this rank's chunk_kda kwargs, the context) for the global batch d."""
    from triton_kda import build_cp_context

    ctx = build_cp_context(d["cu_seqlens"], s.group, cu_seqlens_cpu=d["cu_seqlens_cpu"], layout=layout)
    loc = {n: (local(t.detach(), s, layout).requires_grad_(t.requires_grad) if n in TOKENS else t)
           for n, t in d.items() if n not in ("cu_seqlens", "cu_seqlens_cpu")}
    return loc | {"cu_seqlens": ctx.cu_seqlens, "cp_context": ctx}, ctx


def cp_run(d: dict, do, dht, s: Setup, layout: str, *, backward: bool = True, gather: bool = True) -> dict:
    """One CP call on this rank's slice; with gather, every result assembled to the global shapes (per-token tensors
    gathered, shared gradients and final states summed over the ranks)."""
    loc, _ = cp_inputs(d, s, layout)
    res = run(loc, local(do, s, layout), dht, backward=backward)
    if not gather:
        return res
    out = {}
    for key, x in res.items():
        if key == "final_state" or key[1:] in SHARED:
            x = x.clone()
            dist.all_reduce(x, group=s.group)
            out[key] = x
        else:
            out[key] = full(x, s, layout)
    return out


# ---- checks


def oracle(d: dict, do, dht, *, backward: bool) -> dict:
    """The same outputs from the chunked fp64 oracle."""
    from reference.kda import kda_chunk

    names = [n for n in (*TOKENS, *SHARED) if isinstance(d.get(n), torch.Tensor) and d[n].requires_grad]
    ref = {k: v for k, v in d.items() if k not in ("safe_gate", "cu_seqlens_cpu")}
    ref |= {n: d[n].detach().double().requires_grad_(backward) for n in names}
    with torch.set_grad_enabled(backward):
        r = kda_chunk(**ref, chunk_size=BT)
    out = {"o": r.o.detach()} | ({"final_state": r.final_state.detach()} if r.final_state is not None else {})
    if backward:
        outs, cots = [r.o], [do.double()]
        if r.final_state is not None:
            outs.append(r.final_state)
            cots.append(dht.double())
        out |= {f"d{n}": g for n, g in zip(names, torch.autograd.grad(outs, [ref[n] for n in names], cots),
                                           strict=True)}
    return out


def tolerances() -> tuple[float, float]:
    from benchmarks.checks import BWD_TOL, FWD_TOL

    return FWD_TOL["bf16"], BWD_TOL["bf16"]


def compare(check: str, cp: dict, one: dict, ref: dict | None, rows: list) -> bool:
    """Rows (check, tensor, CP vs fp64, one GPU vs fp64, CP vs one GPU, tol, status)."""
    from reference.harness import rel_rmse

    fwd_tol, bwd_tol = tolerances()
    ok = True
    for name, want in one.items():
        tol = fwd_tol if name in ("o", "final_state") else bwd_tol
        e_cs = rel_rmse(cp[name], want)
        e_c = rel_rmse(cp[name], ref[name]) if ref and name in ref else None
        e_s = rel_rmse(want, ref[name]) if ref and name in ref else None
        good = e_cs <= tol and (e_c is None or e_c <= tol)
        ok &= good
        rows.append([check, name, "-" if e_c is None else f"{e_c:.1e}", "-" if e_s is None else f"{e_s:.1e}",
                     f"{e_cs:.1e}", f"{tol:.0e}", "pass" if good else "FAIL"])
    return ok


def check_long(s: Setup, rows: list) -> bool:
    """(a) and (c): one long sequence with states, CP vs one GPU vs the fp64 forward; two CP runs bit for bit."""
    z = s.sizes
    T = fit(z.check_T, s)
    d = make(s, T, z.check_H, state=True)
    do, dht = cotangents(d)
    one = run(d, do, dht)
    cp = cp_run(d, do, dht, s, "contiguous")
    ref = oracle(d, do, dht, backward=False)
    ok = compare(f"T{T} H{z.check_H} one sequence, h0 + final state", cp, one, ref, rows)
    first = cp_run(d, do, dht, s, "contiguous", gather=False)
    second = cp_run(d, do, dht, s, "contiguous", gather=False)
    same = agree(all(torch.equal(first[k], second[k]) for k in first), s)
    rows.append([f"T{T} two CP runs", "o, final state, every gradient", "-", "-", "bit-identical" if same
                 else "differ", "equal", "pass" if same else "FAIL"])
    return ok and same


def check_varlen(s: Setup, rows: list) -> bool:
    """(b): a varlen batch in both layouts with weak gates, forward and gradients against fp64 autograd."""
    z = s.sizes
    d = make(s, sum(z.grad_seqlens), z.check_H, seqlens=z.grad_seqlens, lower_bound=-0.001, state=True, seed=2)
    do, dht = cotangents(d, seed=3)
    one = run(d, do, dht)
    ref = oracle(d, do, dht, backward=True)
    ok = True
    for layout in ("contiguous", "zigzag"):
        cp = cp_run(d, do, dht, s, layout)
        ok &= compare(f"varlen {list(z.grad_seqlens)} {layout}, weak gates", cp, one, ref, rows)
    return ok


def cuda_only(s: Setup, rows: list, check: str) -> bool:
    """False (and a row saying so) where the ranks run on the CPU."""
    if s.device.type != "cuda":
        rows.append([check, "-", "-", "-", "n/a on CPU", "-", "skipped"])
    return s.device.type == "cuda"


def check_no_sync(s: Setup, rows: list) -> bool:
    """(d): no host-device sync in a CP forward + backward (context built before; cu_seqlens_cpu given)."""
    if not cuda_only(s, rows, "no host sync"):
        return True
    z = s.sizes
    T = z.check_T // 4 // (2 * s.W) * (2 * s.W)
    d = make(s, T, z.check_H, seqlens=(T // 2, T - T // 2), seed=4)
    do, _ = cotangents(d)
    loc, _ = cp_inputs(d, s, "zigzag")
    do_l = local(do, s, "zigzag")
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run(loc, do_l, None)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message)[:100] for w in caught if "called a synchronizing" in str(w.message)]
    ok = agree(not syncs, s)
    rows.append(["no host sync (zigzag, first call of its layout)", "host syncs", "-", "-", str(len(syncs)), "0",
                 "pass" if ok else "FAIL: " + "; ".join(syncs[:2])])
    return ok


def check_graph(s: Setup, rows: list) -> bool:
    """(e): a CP forward captured in a CUDA graph (all-gather included) and replayed equals the eager call."""
    if not cuda_only(s, rows, "CUDA graph"):
        return True
    from triton_kda import chunk_kda

    z = s.sizes
    d = make(s, fit(z.check_T // 4, s), z.check_H, seed=5)
    loc, _ = cp_inputs(d, s, "contiguous")
    loc = {n: t.detach() if isinstance(t, torch.Tensor) else t for n, t in loc.items()}
    with torch.no_grad():
        eager = chunk_kda(**loc, chunk_size=BT)[0]
        torch.cuda.synchronize()
        dist.barrier(group=s.group)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = chunk_kda(**loc, chunk_size=BT)[0]
        graph.replay()
        torch.cuda.synchronize()
    ok = agree(torch.equal(captured, eager), s)
    rows.append(["CUDA graph (CP forward, contiguous)", "o", "-", "-", "replay == eager" if ok else "differ",
                 "equal", "pass" if ok else "FAIL"])
    return ok


# ---- timings


def bench(fn, s: Setup) -> float:
    """ms: the slower rank's median over sizes.reps calls, each after an L2 flush and a barrier."""
    cuda = s.device.type == "cuda"
    flush = torch.empty(256 << 20, dtype=torch.int8, device=s.device) if cuda else None
    fn()
    times = []
    for _ in range(s.sizes.reps):
        if cuda:
            flush.zero_()
            torch.cuda.synchronize()
        dist.barrier(group=s.group)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return max_over_ranks(statistics.median(times), s)


def call_fns(fn_call, d: dict, do):
    """(forward under no_grad, forward + backward into the token leaves) of fn_call(d) -> (o, ...)."""
    leaves = [d[n] for n in TOKENS]

    def fwd():
        with torch.no_grad():
            fn_call(d)

    def fwdbwd():
        o = fn_call(d)[0]
        torch.autograd.grad(o, leaves, do)

    return fwd, fwdbwd


def ours(d: dict):
    from triton_kda import chunk_kda

    return chunk_kda(**d, chunk_size=BT)


def timing_rows(s: Setup, T: int, rows: list, breakdown_rows: list, deadline: float) -> None:
    z = s.sizes
    T = fit(T, s)
    d = make(s, T, z.time_H)
    do, _ = cotangents(d)
    one = {}
    for mode, fn in zip(("fwd", "fwd+bwd"), call_fns(ours, d, do), strict=True):
        one[mode] = bench(fn, s)
    loc, _ = cp_inputs(d, s, "contiguous")
    do_l = local(do, s, "contiguous")
    fwd, fwdbwd = call_fns(ours, loc, do_l)
    for mode, fn in (("fwd", fwd), ("fwd+bwd", fwdbwd)):
        t = bench(fn, s)
        rows.append([f"B1 T{T} H{z.time_H}", mode, f"{one[mode]:.3f}", f"{t:.3f}", f"{t / one[mode]:.3f}",
                     f"{one[mode] / t:.2f}"])
    if agree(time.monotonic() < deadline, s):
        breakdown(fwdbwd, s, f"B1 T{T} H{z.time_H} fwd+bwd", breakdown_rows)
        allgather_row(s, z.time_H, breakdown_rows)


CATEGORIES = (("NCCL (incl. waiting for peers)", ("nccl",)), ("CP map + chain kernels", ("_kda_state_cp_",)),
              ("state kernels", ("_kda_state_",)), ("rest", ("",)))


def breakdown(fn, s: Setup, label: str, rows: list, calls: int = 3) -> None:
    """Kernel times per call of fn by category (torch.profiler), per rank."""
    if s.device.type != "cuda":
        return
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    dist.barrier(group=s.group)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    sums = dict.fromkeys([c for c, _ in CATEGORIES], 0.0)
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        name = e.name.lower()
        for cat, keys in CATEGORIES:
            if any(k in name for k in keys):
                sums[cat] += e.time_range.elapsed_us() / 1e3 / calls
                break
    per_rank = torch.tensor([sums[c] for c, _ in CATEGORIES], dtype=torch.float64, device=s.device)
    gathered = torch.empty(s.W * len(CATEGORIES), dtype=torch.float64, device=s.device)
    dist.all_gather_into_tensor(gathered, per_rank, group=s.group)
    gathered = gathered.view(s.W, len(CATEGORIES))
    for r in range(s.W):
        total = float(gathered[r].sum())
        rows.append([label, f"rank {r}", f"{total:.3f}"] + [f"{float(v):.3f} ({float(v) / total:.1%})"
                                                            for v in gathered[r]])


def allgather_row(s: Setup, H: int, rows: list) -> None:
    """The all-gather of one rank's map buffer ([1, HV, K, K + V] fp32, as in a contiguous call) alone."""
    K = s.sizes.K
    buf = torch.randn(1, H, K, 2 * K, device=s.device)
    out = torch.empty(s.W, H, K, 2 * K, device=s.device)
    t = bench(lambda: dist.all_gather_into_tensor(out, buf, group=s.group), s)
    rows.append([f"all-gather of one map buffer ({buf.numel() * 4 / 2**20:.1f} MiB per rank)", "-", f"{t:.3f}"]
                + ["-"] * len(CATEGORIES))


def fla_rows(s: Setup, T: int, ours_rows: list, rows: list) -> None:
    """fla's CP on the same shape, forward and fwd+bwd, beside ours."""
    from fla.ops.cp import build_cp_context as fla_build_cp_context
    from fla.ops.kda import chunk_kda as fla_chunk_kda

    z = s.sizes
    T = fit(T, s)
    d = make(s, T, z.time_H)
    do, _ = cotangents(d)
    ctx = fla_build_cp_context(d["cu_seqlens"], group=s.group, cu_seqlens_cpu=d["cu_seqlens_cpu"])
    loc = {n: (local(t.detach(), s, "contiguous").requires_grad_(t.requires_grad) if n in TOKENS else t)
           for n, t in d.items() if n not in ("cu_seqlens", "cu_seqlens_cpu", "initial_state",
                                              "output_final_state")}

    def fla_call(dd):
        return fla_chunk_kda(**dd, cu_seqlens=ctx.cu_seqlens, cp_context=ctx, chunk_size=BT)

    mine = {r[1]: float(r[3]) for r in ours_rows if r[0] == f"B1 T{T} H{z.time_H}"}
    for mode, fn in zip(("fwd", "fwd+bwd"), call_fns(fla_call, loc, local(do, s, "contiguous")), strict=True):
        t0 = time.monotonic()
        fn()  # first call: fla tunes
        first = time.monotonic() - t0
        t = bench(fn, s)
        rows.append([f"B1 T{T} H{z.time_H}", mode, f"{t:.3f}", f"{mine.get(mode, float('nan')):.3f}",
                     f"{t / mine[mode]:.2f}" if mode in mine else "-", f"{first:.0f}"])


# ---- report


def table(headers, body) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in body])


def write(out: Path, s: Setup, sections: dict, notes: list) -> None:
    import triton

    import triton_kda

    if s.device.type == "cuda":
        props = torch.cuda.get_device_properties(s.device)
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        dev = f"{s.W} x {props.name} ({props.multi_processor_count} SMs), NCCL {nccl}"
    else:
        dev = f"{s.W} CPU processes (gloo, Triton interpreter)"
    env = ", ".join(f"{k}={os.environ.get(k)}" for k in MULTICAST_OFF)
    z = s.sizes
    text = "\n\n".join([
        "# Context parallel over ranks (triton_kda/cp.py)",
        f"{dev}; torch {torch.__version__}, triton {triton.__version__}, triton_kda from "
        f"{Path(triton_kda.__file__).parent}; {env}. {str(z.dtype).removeprefix('torch.')}, K = V = {z.K}, Kimi "
        f"flags, chunk {BT}.",
        "## Checks (rel RMSE)",
        table(["check", "tensor", "CP vs fp64", "one GPU vs fp64", "CP vs one GPU", "tol", "status"],
              sections["checks"]),
        f"## Timings (ms; one GPU = the whole sequence on one GPU, CP = {s.W} ranks)",
        table(["shape", "mode", "one GPU", "CP", "CP / one GPU", "speed-up"], sections["timings"]),
        "## The collective's share (kernel time per call, torch.profiler)",
        table(["call", "rank", "kernels ms"] + [c for c, _ in CATEGORIES], sections["breakdown"]),
        f"## fla 0.6.0's CP on the same {s.W} ranks (ms)",
        table(["shape", "mode", "fla CP", "ours CP", "fla / ours", "fla first call s"], sections["fla"]),
        *notes,
    ]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cp_dist.md").write_text(text)
    (out / "cp_dist.json").write_text(json.dumps({"sections": sections, "notes": notes}, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cp_dist", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--fla", action="store_true", help="time fla's CP beside ours (it tunes for minutes)")
    ap.add_argument("--tune-cache", help="keep fla's autotuning results in this folder between runs")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (fp32 on CPU, bf16 on GPUs)")
    ap.add_argument("--timings-only", action="store_true", help="sections 2-4 only (no checks)")
    ap.add_argument("--T", type=int, nargs="+", help="tokens of the timed sequences (default 131072 262144; --smoke "
                    "128 256), cut to a multiple of the ranks")
    args = ap.parse_args(argv)
    os.environ.update(MULTICAST_OFF)
    cuda = torch.cuda.is_available()
    if cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(minutes=4))
    else:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(1)
        device = torch.device("cpu")
        # interpreter ranks on a busy CPU (a test run beside others) can wait minutes for each other
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    sizes = SMOKE if args.smoke else FULL
    if args.smoke and cuda:
        sizes = Sizes(SMOKE.check_T, SMOKE.check_H, SMOKE.grad_seqlens, SMOKE.time_Ts, SMOKE.time_H, 128,
                      torch.bfloat16, 3)
    if args.T:
        shortest = BT * dist.get_world_size()  # one chunk per rank
        if min(args.T) < shortest:
            raise SystemExit(f"cp_dist: --T must be at least {shortest} tokens (one chunk per rank), got {args.T}")
        sizes = replace(sizes, time_Ts=tuple(args.T))
    s = Setup(dist.get_rank(), dist.get_world_size(), device, dist.group.WORLD, sizes)
    deadline = time.monotonic() + args.budget_s
    out = Path(args.out)
    if args.tune_cache and s.rank == 0:
        from benchmarks import tune_cache

        tune_cache.restore(Path(args.tune_cache))
    sections = {"checks": [], "timings": [], "breakdown": [], "fla": []}
    notes = []
    ok = True

    def step(name, fn, *fn_args):
        nonlocal ok
        if not agree(time.monotonic() < deadline, s):
            notes.append(f"{name}: not run (budget spent)")
            return
        t0 = time.monotonic()
        try:
            res = fn(s, *fn_args)
            ok &= res is not False
        except Exception:
            ok = False
            notes.append(f"{name} raised on rank {s.rank}:\n```\n{traceback.format_exc()[-3000:]}```")
            if s.rank != 0:
                print(notes[-1], file=sys.stderr, flush=True)
        if s.device.type == "cuda":
            torch.cuda.empty_cache()
        log(s, f"{name}: {time.monotonic() - t0:.0f} s")
        if s.rank == 0:
            write(out, s, sections, notes)

    checks = not args.timings_only
    if checks:
        step("check long", check_long, sections["checks"])
        step("check varlen", check_varlen, sections["checks"])
        step("check no sync", check_no_sync, sections["checks"])
    for T in sizes.time_Ts:
        step(f"timings T{T}", timing_rows, T, sections["timings"], sections["breakdown"], deadline)
    if args.fla:
        for T in sizes.time_Ts:
            step(f"fla T{T}", fla_rows, T, sections["timings"], sections["fla"])
    if checks:
        step("check graph", check_graph, sections["checks"])
    if args.tune_cache and s.rank == 0:
        from benchmarks import tune_cache

        tune_cache.save(Path(args.tune_cache))
    if s.rank == 0:
        print((out / "cp_dist.md").read_text(), flush=True)
    dist.barrier()  # every rank done with its collectives before any leaves
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without tearing the process group down: at interpreter exit gloo's threads aborted a CPU rank after its
    # report was written (CI, 2026-11-27 without and 2026-11-28 with destroy_process_group after a barrier).
    os._exit(code)

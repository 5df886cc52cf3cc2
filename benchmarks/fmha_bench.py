"""FMHA on a GPU: bf16/fp16 correctness against the fp64 oracle, then timings against the measured bf16 matmul rate,
the copy bandwidth and torch's scaled_dot_product_attention where it supports the case.

    PYTHONPATH=. python -m benchmarks.fmha_bench --out DIR [--workers 8] [--sweep] [--skip-check]

Correctness cases and the compile of every benchmarked kernel run first in a pool of processes (Triton compiles are
CPU-bound and each kernel variant is its own compile); timings then run in this process, one case at a time,
`triton.testing.do_bench` medians. Writes DIR/fmha_bench.md (tables) and DIR/fmha_bench.json, prints a summary last,
and exits 1 if a correctness case fails its bounds.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import torch

COS_MIN = 0.9999
RMSE_MAX = 1e-2
LSE_RMSE_MAX = 1e-3


@dataclass(frozen=True)
class Case:
    """One call. mode: 'dense' (causal/window), 'gather' (topk over kv), 'fused' (window over kv + topk over kv_cmp),
    'merge' (two partial halves of the keys merged with the sink). HKV = 0 means MQA through `kv`."""

    name: str
    mode: str
    B: int
    T: int
    S: int
    HQ: int
    D: int
    dtype: str = "bf16"
    HKV: int = 0
    causal: bool = True
    window: int | None = None
    sinks: bool = True
    topk: int = 0
    S_C: int = 0
    empty: float = 0.25
    kv_lens: tuple | None = None
    seqlens: tuple | None = None
    config: tuple | None = None

    @property
    def torch_dtype(self) -> torch.dtype:
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.dtype]


# bf16/fp16 against fp64: D in {64, 128, 256, 512}, KV up to 8K, windows, sinks, gather with empty slots, the fused
# path, varlen, GQA, split-KV decode and the merge identities.
CHECK_CASES = [
    Case("causal-B1-T1024-HQ16-D64", "dense", 1, 1024, 1024, 16, 64),
    Case("causal-B1-T1024-HQ16-D128", "dense", 1, 1024, 1024, 16, 128),
    Case("causal-B1-T1024-HQ16-D256", "dense", 1, 1024, 1024, 16, 256),
    Case("causal-B1-T1024-HQ16-D512", "dense", 1, 1024, 1024, 16, 512),
    Case("causal-B1-T1024-HQ16-D128-fp16", "dense", 1, 1024, 1024, 16, 128, dtype="fp16"),
    Case("causal-B1-T1024-HQ16-D512-fp16", "dense", 1, 1024, 1024, 16, 512, dtype="fp16"),
    Case("window128-B1-T2048-HQ64-D512", "dense", 1, 2048, 2048, 64, 512, window=128),
    Case("window128-B2-T1024-HQ64-D128-fp16", "dense", 2, 1024, 1024, 64, 128, dtype="fp16", window=128),
    Case("causal-gqa-B1-T2048-HQ32-HKV4-D128", "dense", 1, 2048, 2048, 32, 128, HKV=4),
    Case("causal-gqa-B1-T1024-HQ16-HKV2-D512", "dense", 1, 1024, 1024, 16, 512, HKV=2),
    Case("full-B2-T300-S8192-HQ8-D256", "dense", 2, 300, 8192, 8, 256, causal=False),
    Case("decode-B4-S8192-HQ64-D512-kvlens", "dense", 4, 1, 8192, 64, 512, kv_lens=(8192, 5000, 1, 7777)),
    Case("decode-B4-S8192-HQ128-D512-fp16", "dense", 4, 1, 8192, 128, 512, dtype="fp16"),
    Case("gather-B2-T64-S8192-HQ64-D512-topk512", "gather", 2, 64, 8192, 64, 512, causal=False, topk=512),
    Case("gather-B2-T64-S4096-HQ16-D128-topk256-fp16", "gather", 2, 64, 4096, 16, 128, dtype="fp16", causal=False,
         topk=256),
    Case("fused-B1-T512-HQ64-D512-W128-SC2048-topk512", "fused", 1, 512, 512, 64, 512, window=128, topk=512,
         S_C=2048),
    Case("fused-decode-B8-S8192-HQ128-D512-W128-topk512", "fused", 8, 1, 8192, 128, 512, window=128, topk=512,
         S_C=2048),
    Case("varlen-window128-D256", "dense", 1, 1500, 1500, 16, 256, window=128, seqlens=(300, 1, 0, 1199)),
    Case("window128-online-B1-T2048-HQ64-D512", "dense", 1, 2048, 2048, 64, 512, window=128,
         config=(64, 64, None, 8, 2)),
    Case("window128-decode-B4-S8192-HQ64-D512-kvlens", "dense", 4, 1, 8192, 64, 512, window=128,
         kv_lens=(8192, 100, 1, 0)),
    Case("window128-block256-B1-T2048-HQ32-HKV4-D128", "dense", 1, 2048, 2048, 32, 128, HKV=4, window=128,
         config=("window", 64, 64, 64, 4, 3)),
    Case("merge-halves-decode-B4-S8192-HQ64-D512", "merge", 4, 1, 8192, 64, 512),
]


def _make(case: Case, device: str = "cuda", seed: int = 0) -> dict:
    """Inputs of a case (seeded), as kwargs for the kernel call, plus 'k'/'v' views for the reference."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = case.torch_dtype

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dt)

    B, T, S, HQ, D = case.B, case.T, case.S, case.HQ, case.D
    out = {"q": randn(B, T, HQ, D) * 1.5}
    if case.HKV:
        out["k"], out["v"] = randn(B, S, case.HKV, D), randn(B, S, case.HKV, D)
    else:
        out["kv"] = randn(B, S, D)
    if case.sinks:
        out["sinks"] = torch.randn(HQ, generator=gen, device=device) * 2
    if case.kv_lens is not None:
        out["kv_lens"] = torch.tensor(case.kv_lens, dtype=torch.int32, device=device)
    if case.seqlens is not None:
        out["cu_seqlens"] = torch.tensor([0, *torch.tensor(case.seqlens).cumsum(0).tolist()], device=device)
    if case.mode in ("gather", "fused"):
        n_keys = case.S_C if case.mode == "fused" else S
        if case.mode == "fused":
            out["kv_cmp"] = randn(B, n_keys, D)
        scores = torch.rand(B, T, n_keys, generator=gen, device=device)
        idx = scores.topk(case.topk, dim=-1).indices.to(torch.int32)
        drop = torch.rand(B, T, case.topk, generator=gen, device=device) < case.empty
        out["topk_indices"] = idx.masked_fill(drop, -1)
    return out


def make_config(t: tuple):
    """A case's launch tuple: ("window", bm, bd, bdv, warps, stages) is a WindowConfig (single-block window kernel),
    (bm, bn, bdv, warps, stages) an FmhaConfig (online-softmax kernel)."""
    from triton_kda.fmha import FmhaConfig, WindowConfig

    return WindowConfig(*t[1:]) if t[0] == "window" else FmhaConfig(*t)


def run_case(case: Case, inputs: dict, check_inputs: bool = True):
    """The kernel call of a case; returns FmhaOutput. Timings pass check_inputs=False (no host sync)."""
    from triton_kda.fmha import fmha_fwd, fmha_merge, fmha_swa_compressed

    cfg = make_config(case.config) if case.config else None
    x = inputs
    common = dict(sinks=x.get("sinks"), config=cfg, check_inputs=check_inputs)
    if case.mode == "fused":
        return fmha_swa_compressed(x["q"], x["kv"], x["kv_cmp"], x["topk_indices"], window=case.window,
                                   kv_lens=x.get("kv_lens"), cu_seqlens=x.get("cu_seqlens"), **common)
    if case.mode == "merge":
        half = case.S // 2
        common.pop("sinks")
        a = fmha_fwd(x["q"], x["kv"][:, :half], causal=case.causal, partial=True, **common)
        b = fmha_fwd(x["q"], x["kv"][:, half:], causal=case.causal, partial=True, **common)
        return fmha_merge(a.o, a.lse, b.o, b.lse, sinks=x.get("sinks"), out_dtype=x["q"].dtype)
    kv = dict(kv=x["kv"]) if "kv" in x else dict(k=x["k"], v=x["v"])
    if case.mode == "gather":
        return fmha_fwd(x["q"], **kv, topk_indices=x["topk_indices"], **common)
    return fmha_fwd(x["q"], **kv, causal=case.causal, window=case.window, kv_lens=x.get("kv_lens"),
                    cu_seqlens=x.get("cu_seqlens"), **common)


def reference_case(case: Case, inputs: dict):
    from reference.fmha import fmha_ref

    x = inputs
    k = x["kv"].unsqueeze(2) if "kv" in x else x["k"]
    v = x["kv"].unsqueeze(2) if "kv" in x else x["v"]
    if case.mode == "gather":
        return fmha_ref(x["q"], topk_indices=x["topk_indices"], k_gather=k, v_gather=v, sinks=x.get("sinks"))
    if case.mode == "fused":
        kc = x["kv_cmp"].unsqueeze(2)
        return fmha_ref(x["q"], k, v, causal=True, window=case.window, topk_indices=x["topk_indices"], k_gather=kc,
                        v_gather=kc, kv_lens=x.get("kv_lens"), cu_seqlens=x.get("cu_seqlens"), sinks=x.get("sinks"))
    return fmha_ref(x["q"], k, v, causal=case.causal, window=case.window, sinks=x.get("sinks"),
                    kv_lens=x.get("kv_lens"), cu_seqlens=x.get("cu_seqlens"))


def _metrics(out: torch.Tensor, ref: torch.Tensor) -> dict:
    a, r = out.double(), ref.double()
    fin = torch.isfinite(r)
    if not torch.equal(torch.isfinite(a), fin) or not torch.equal(a[~fin], r[~fin]):
        return {"rel_rmse": math.inf, "cos": -1.0, "max_abs": math.inf}
    a, r = a[fin], r[fin]
    diff = (a - r).norm().item()
    norm = r.norm().item()
    cos = (torch.dot(a, r) / (a.norm() * r.norm())).item() if norm > 0 else 1.0
    return {"rel_rmse": diff / norm if norm > 0 else diff, "cos": cos, "max_abs": (a - r).abs().max().item()}


def check_case(case: Case, device: str = "cuda") -> dict:
    """Run one correctness case against the fp64 oracle; the dict says whether it is within bounds
    (o: rel RMSE <= 1e-2 and cosine >= 0.9999; lse: rel RMSE <= 1e-3)."""
    x = _make(case, device)
    out = run_case(case, x)
    ref = reference_case(case, x)
    mo, ml = _metrics(out.o, ref[0]), _metrics(out.lse, ref[1])
    ok = mo["rel_rmse"] <= RMSE_MAX and mo["cos"] >= COS_MIN and ml["rel_rmse"] <= LSE_RMSE_MAX
    res = {"case": case.name, "dtype": case.dtype, "o": mo, "lse": ml, "ok": ok}
    if case.mode == "merge":
        # merging with an empty branch is a no-op, bit for bit
        from triton_kda.fmha import fmha_fwd, fmha_merge

        a = fmha_fwd(x["q"], x["kv"], causal=True, partial=True)
        none = fmha_merge(a.o, a.lse, torch.full_like(a.o, math.nan), torch.full_like(a.lse, -math.inf))
        res["empty_branch_noop"] = bool(torch.equal(none.o, a.o) and torch.equal(none.lse, a.lse))
        res["ok"] = res["ok"] and res["empty_branch_noop"]
    return res


# ---------------------------------------------------------------------------------------------------------- timings
@dataclass(frozen=True)
class Bench:
    case: Case
    sdpa: bool  # time torch SDPA on the same problem (causal prefill, or decode with heads as query rows)
    sweep: tuple = field(default=())


# Alternative launch configs timed with --sweep beside the default: (block_m, block_n, block_dv, warps, stages) for
# the online-softmax kernel, ("window", block_m, block_d, block_dv, warps, stages) for the single-block window kernel.
SWEEP_D512_LONG = ((64, 16, 256, 4, 2), (128, 32, 256, 8, 2))
SWEEP_D512_WINDOW = ((64, 64, None, 8, 2), ("window", 64, 64, 128, 4, 3), ("window", 64, 128, 64, 4, 2),
                     ("window", 64, 32, 64, 4, 4), ("window", 64, 64, 64, 4, 2), ("window", 64, 64, 64, 8, 3))
SWEEP_D128 = ((128, 64, None, 8, 3), (64, 128, None, 4, 3), (64, 64, None, 4, 4))
SWEEP_D128_WINDOW = ((64, 64, None, 4, 3), (128, 64, None, 8, 3), ("window", 64, 128, 128, 4, 2),
                     ("window", 64, 32, 64, 4, 4))
SWEEP_GQA_WINDOW = (("window", 64, 64, 64, 4, 3), ("window", 64, 128, 128, 8, 2))
SWEEP_DECODE = ((64, 16, 256, 4, 2), (64, 32, None, 8, 2))

BENCHES = [
    Bench(Case("prefill-B1-T8192-HQ64-D512-W128", "dense", 1, 8192, 8192, 64, 512, window=128), False,
          SWEEP_D512_WINDOW),
    Bench(Case("prefill-B1-T8192-HQ64-D512-causal", "dense", 1, 8192, 8192, 64, 512), True, SWEEP_D512_LONG),
    Bench(Case("prefill-B1-T8192-HQ64-D128-causal", "dense", 1, 8192, 8192, 64, 128, sinks=False), True,
          SWEEP_D128),
    Bench(Case("prefill-B1-T8192-HQ64-D128-W128", "dense", 1, 8192, 8192, 64, 128, window=128), False,
          SWEEP_D128_WINDOW),
    Bench(Case("prefill-B1-T8192-HQ64-HKV8-D128-W128", "dense", 1, 8192, 8192, 64, 128, HKV=8, window=128), False,
          SWEEP_GQA_WINDOW),
    Bench(Case("prefill-B1-T8192-HQ64-D64-causal", "dense", 1, 8192, 8192, 64, 64, sinks=False), True),
    Bench(Case("prefill-B1-T8192-HQ64-D256-causal", "dense", 1, 8192, 8192, 64, 256, sinks=False), True),
    Bench(Case("prefill-fused-B1-T8192-HQ64-D512-W128-topk512", "fused", 1, 8192, 8192, 64, 512, window=128,
               topk=512, S_C=2048, empty=0.0), False, ((64, 16, 256, 4, 2),)),
    Bench(Case("decode-B32-S8192-HQ64-D512", "dense", 32, 1, 8192, 64, 512), True, SWEEP_DECODE),
    Bench(Case("decode-B32-S8192-HQ128-D512", "dense", 32, 1, 8192, 128, 512), True, SWEEP_DECODE),
    Bench(Case("decode-fused-B32-HQ64-D512-W128-topk512", "fused", 32, 1, 8192, 64, 512, window=128, topk=512,
               S_C=2048, empty=0.0), False, ((64, 16, 256, 4, 2),)),
    Bench(Case("decode-fused-B32-HQ128-D512-W128-topk512", "fused", 32, 1, 8192, 128, 512, window=128, topk=512,
               S_C=2048, empty=0.0), False),
]


def resolved_config(case: Case) -> tuple:
    """The launch config a case runs with: its own, or the default table's pick on this device."""
    if case.config is not None:
        return tuple(case.config)
    from triton_kda.fmha.configs import fmha_config, window_config

    G = case.HQ // (case.HKV or 1)
    T = None if case.seqlens is not None else case.T
    dev = torch.device("cuda")
    w = window_config(G, T, case.window, dev) if case.mode == "dense" and case.window is not None else None
    if w is not None:
        return ("window", w.block_m, w.block_d, w.block_dv, w.num_warps, w.num_stages)
    cfg = fmha_config(case.D, G, T, case.mode in ("gather", "fused"), dev, itemsize=case.torch_dtype.itemsize,
                      same_kv=not case.HKV)
    return (cfg.block_m, cfg.block_n, cfg.block_dv, cfg.num_warps, cfg.num_stages)


def _with_config(case: Case, cfg: tuple | None) -> Case:
    return Case(**{**asdict(case), "config": cfg})


def attended_pairs(case: Case) -> int:
    """(query head, key) pairs a case attends to (its useful work; empty slots excluded only when empty = 0)."""
    per_seq = []
    T, S = case.T, case.S
    dense = 0
    if case.mode in ("dense", "fused", "merge"):
        for t in range(T):
            pos = S - T + t
            n = pos + 1 if case.causal else S
            if case.window is not None:
                n = min(n, case.window)
            dense += n
    per_seq.append(dense + (T * case.topk if case.mode in ("gather", "fused") else 0))
    return case.B * case.HQ * sum(per_seq)


def flops(case: Case) -> float:
    return 4.0 * case.D * attended_pairs(case)


def bytes_moved(case: Case) -> float:
    """Compulsory HBM bytes (bf16): q and o once, each distinct kv row once, the indices (decode is bound by this)."""
    e = 2
    total = 2 * case.B * case.T * case.HQ * case.D * e
    if case.mode in ("dense", "fused"):
        rows = case.S if case.window is None else min(case.S, case.window + case.T - 1)
        total += case.B * rows * case.D * e
    if case.mode in ("gather", "fused"):
        n_keys = case.S_C if case.mode == "fused" else case.S
        total += case.B * min(n_keys, case.T * case.topk) * case.D * e + case.B * case.T * case.topk * 4
    return total


def _sdpa_calls(case: Case, x: dict) -> list:
    """(label, fn) pairs timing torch SDPA on the same problem, restricted to its fused kernels (cuDNN, flash,
    memory-efficient; never the math fallback)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    q, kv = x["q"], x["kv"]

    def call(qq, kk, **kw):
        def fn():
            with sdpa_kernel(backends):
                return F.scaled_dot_product_attention(qq, kk, kk, **kw)
        return fn

    if case.T == 1:  # decode, no mask: the HQ heads of one token become HQ query rows of the single kv head
        return [("sdpa", call(q.view(case.B, 1, case.HQ, case.D), kv.view(case.B, 1, case.S, case.D)))]
    qq = q.transpose(1, 2)
    expanded = kv.unsqueeze(1).expand(case.B, case.HQ, case.S, case.D).contiguous()
    return [("sdpa", call(qq, kv.unsqueeze(1), is_causal=True, enable_gqa=True)),
            ("sdpa_expanded", call(qq, expanded, is_causal=True))]


def _warm(case: Case) -> str:
    """Compile (in a pool worker) the kernels a timed case needs, by running it once on its own shapes."""
    x = _make(case)
    run_case(case, x, check_inputs=False)
    torch.cuda.synchronize()
    return case.name


def _time(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def _ceilings() -> dict:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = _time(lambda: a @ b)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    cp = _time(lambda: dst.copy_(src))
    return {"matmul_tflops": 2 * n**3 / mm / 1e9, "copy_gbs": 2 * src.numel() / cp / 1e6}


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def render(header: str, ceil: dict, results: list, rows: list, footer: str) -> str:
    """Markdown tables of the correctness results and the timing rows."""
    lines = [header, "", f"Measured bf16 matmul (8192^3) {ceil['matmul_tflops']:.0f} TFLOP/s, device copy "
             f"{ceil['copy_gbs']:.0f} GB/s (read + write).", "",
             "## Correctness vs fp64 (o: rel RMSE <= 1e-2 and cosine >= 0.9999; lse: rel RMSE <= 1e-3)", "",
             "| case | dtype | o rel RMSE | o cosine | o max abs | lse rel RMSE | ok |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['dtype']} | error: {r['error'][:200]} | | | | FAIL |")
            continue
        extra = "" if "empty_branch_noop" not in r else f" (empty-branch no-op: {r['empty_branch_noop']})"
        lines.append(f"| {r['case']} | {r['dtype']} | {r['o']['rel_rmse']:.2e} | {r['o']['cos']:.7f} | "
                     f"{r['o']['max_abs']:.2e} | {r['lse']['rel_rmse']:.2e} | {'ok' if r['ok'] else 'FAIL'}{extra} |")
    lines += ["", "## Timings (bf16, median ms of do_bench, check_inputs=False; TFLOP/s counts only attended "
              "(query head, key) pairs at 4*D FLOP each; GB/s counts compulsory bytes: q, o, each distinct kv row "
              "once)", "",
              "Config: (bm, bn, bdv, warps, stages) is the online-softmax kernel, ('window', bm, bd, bdv, warps, "
              "stages) the single-block window kernel.", "",
              "| case | config | ms | TFLOP/s | % matmul | GB/s | SDPA ms | ours / SDPA |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cfg = str(tuple(r["resolved"])) + (" default" if r["config"] is None else "")
        if "error" in r:
            lines.append(f"| {r['case']} | {cfg} | error: {r['error'][:200]} | | | | | |")
            continue
        sd_ms = _sdpa_ms(r)
        ratio = r["ms"] / sd_ms if sd_ms else None
        note = "" if sd_ms or r["config"] is not None else " (no SDPA kernel)"
        lines.append(f"| {r['case']} | {cfg} | {r['ms']:.3f} | {r['tflops']:.0f} | "
                     f"{100 * r['tflops'] / ceil['matmul_tflops']:.0f}% | {r['gbs']:.0f} | {_fmt(sd_ms)}{note} | "
                     f"{_fmt(ratio, '.2f')} |")
    sdpa_err = [f"- {r['case']}: {k}: {r[k]}" for r in rows for k in r if k.endswith("_error")]
    if sdpa_err:
        lines += ["", "SDPA attempts that had no kernel:", *sdpa_err]
    return "\n".join([*lines, "", footer]) + "\n"


def _sdpa_ms(row: dict) -> float | None:
    got = [row[k] for k in ("sdpa_ms", "sdpa_expanded_ms") if k in row]
    return min(got) if got else None


def kernel_resources() -> list[dict]:
    """Registers, spills, shared memory, warps and stages of every FMHA kernel variant compiled in this process,
    with its block sizes (what decides how many programs share an SM)."""
    from triton_kda.fmha.fwd import _fmha_attn_fwd_kernel
    from triton_kda.fmha.window import _fmha_window_fwd_kernel

    rows = []
    for fn in (_fmha_attn_fwd_kernel, _fmha_window_fwd_kernel):
        for caches in getattr(fn, "device_caches", {}).values():  # none under the interpreter
            for ck in caches[0].values():
                ck._init_handles()
                consts = {fn.arg_names[path[0]]: val for path, val in ck.src.constants.items()}  # {(i,): value}
                rows.append({"kernel": fn.__name__, "n_regs": ck.n_regs, "n_spills": ck.n_spills,
                             "shared": ck.metadata.shared, "num_warps": ck.metadata.num_warps,
                             "num_stages": ck.metadata.num_stages,
                             "blocks": {k: v for k, v in consts.items() if k.startswith("BLOCK_") or k in ("D", "DV")}})
    return rows


def render_resources(rows: list[dict]) -> str:
    lines = ["## Compiled kernels", "", "| kernel | blocks | warps | stages | registers | spills | shared KB |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["kernel"], sorted(r["blocks"].items()))):
        blocks = ", ".join(f"{k}={v}" for k, v in sorted(r["blocks"].items()))
        lines.append(f"| {r['kernel']} | {blocks} | {r['num_warps']} | {r['num_stages']} | {r['n_regs']} | "
                     f"{r['n_spills']} | {r['shared'] / 1024:.0f} |")
    return "\n".join(lines) + "\n"


def summary(ceil: dict, results: list, rows: list) -> list[str]:
    """The verdict lines: correctness, D128 causal prefill vs SDPA (<= 1.3x), D512 prefill vs matmul (>= 30%)."""
    failed = [r["case"] for r in results if not r["ok"]]
    out = [f"correctness: {len(results) - len(failed)}/{len(results)} ok" + (f"; FAILED: {failed}" if failed else "")]
    timed = [r for r in rows if "ms" in r]
    for r in timed:
        if r["config"] is None and r["case"] == "prefill-B1-T8192-HQ64-D128-causal" and _sdpa_ms(r):
            out.append(f"D128 causal prefill: ours {r['ms']:.3f} ms vs SDPA {_sdpa_ms(r):.3f} ms = "
                       f"{r['ms'] / _sdpa_ms(r):.2f}x (must be <= 1.3x)")
    for name in ("prefill-B1-T8192-HQ64-D512-causal", "prefill-B1-T8192-HQ64-D512-W128"):
        got = [r for r in timed if r["case"] == name]
        default = [r for r in got if r["config"] is None]
        if default:
            best = min(got, key=lambda r: r["ms"])
            out.append(f"{name}: default {tuple(default[0]['resolved'])} {default[0]['tflops']:.0f} TFLOP/s = "
                       f"{100 * default[0]['tflops'] / ceil['matmul_tflops']:.0f}% of matmul (must be >= 30%); "
                       f"best config {tuple(best['resolved'])}: "
                       f"{100 * best['tflops'] / ceil['matmul_tflops']:.0f}%")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="fmha-bench-out")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sweep", action="store_true", help="also time the alternative launch configs of a case")
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fmha_bench needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    timed = []
    for bench in BENCHES:
        timed.append((bench, bench.case))
        if args.sweep:
            timed += [(bench, _with_config(bench.case, cfg)) for cfg in bench.sweep]
    checks = [] if args.skip_check else CHECK_CASES
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=mp.get_context("spawn")) as pool:
        check_futs = [pool.submit(check_case, c) for c in checks]
        warm_futs = [pool.submit(_warm, c) for _, c in timed]
        results = []
        for c, f in zip(checks, check_futs, strict=True):
            try:
                results.append(f.result())
            except Exception as e:  # a crash is a failed case, reported with its message
                results.append({"case": c.name, "dtype": c.dtype, "ok": False, "error": f"{type(e).__name__}: {e}"})
        warm_errors = {}
        for (_, c), f in zip(timed, warm_futs, strict=True):
            try:
                f.result()
            except Exception as e:
                warm_errors[(c.name, c.config)] = f"{type(e).__name__}: {e}"
    t_compile = time.time() - t_start

    ceil = _ceilings()
    rows = []
    for bench, case in timed:
        row = {"case": case.name, "config": case.config, "resolved": resolved_config(case)}
        if (case.name, case.config) in warm_errors:
            row["error"] = warm_errors[(case.name, case.config)]
            rows.append(row)
            continue
        x = _make(case)
        ms = _time(lambda case=case, x=x: run_case(case, x, check_inputs=False))
        row.update(ms=ms, tflops=flops(case) / ms / 1e9, gbs=bytes_moved(case) / ms / 1e6)
        if case.config is None and bench.sdpa:
            for label, fn in _sdpa_calls(case, x):
                try:
                    row[label + "_ms"] = _time(fn)
                except Exception as e:  # SDPA has no kernel for this case
                    row[label + "_error"] = f"{type(e).__name__}: {str(e)[:120]}"
        del x
        torch.cuda.empty_cache()
        rows.append(row)

    dev = torch.cuda.get_device_name()
    try:
        resources = kernel_resources()
    except Exception as e:  # introspection of Triton internals; the timings above must not be lost to it
        print(f"kernel resources not available: {type(e).__name__}: {e}", file=sys.stderr)
        resources = []
    with open(os.path.join(args.out, "fmha_bench.json"), "w") as f:
        json.dump({"device": dev, "ceilings": ceil, "checks": results, "timings": rows, "kernels": resources}, f,
                  indent=1, default=str)
    header = f"# FMHA on {dev} (torch {torch.__version__}, triton {triton.__version__})"
    footer = f"Compile + correctness phase {t_compile:.0f} s, total {time.time() - t_start:.0f} s."
    text = render(header, ceil, results, rows, footer) + "\n" + render_resources(resources)
    with open(os.path.join(args.out, "fmha_bench.md"), "w") as f:
        f.write(text)
    print(text)
    print("SUMMARY")
    print("\n".join(summary(ceil, results, rows)))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

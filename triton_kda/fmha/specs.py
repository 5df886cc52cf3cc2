"""Ahead-of-time compile specs of the FMHA kernels (kda-portability): what the launch tables run on each
architecture."""
from __future__ import annotations

import inspect

import torch
import triton.language as tl

from triton_kda.configs import CompileSpec
from triton_kda.fmha.configs import arch_config, window_arch_config, window_keys
from triton_kda.fmha.fwd import _fmha_attn_fwd_kernel, dot_precision
from triton_kda.fmha.window import _fmha_window_fwd_kernel


def _signature(fn, pointers: dict[str, str]) -> dict[str, str]:
    """Triton signature of `fn`'s runtime arguments: `<name>_ptr` from `pointers` (int32 tables by default), the
    softmax scale fp32, every other scalar (sizes, strides, window) int32."""
    sig = {}
    # read from the Python function's annotations, so that it works on jitted and interpreted kernels alike
    for name, param in inspect.signature(getattr(fn, "fn", fn)).parameters.items():
        if param.annotation is tl.constexpr or str(param.annotation).endswith("constexpr"):
            continue
        if name.endswith("_ptr"):
            sig[name] = pointers.get(name[: -len("_ptr")], "*i32")
        else:
            sig[name] = "fp32" if name == "qk_scale" else "i32"
    return sig


def fmha_compile_specs(arch: int) -> list:
    """The FMHA kernels as the launch table runs them on `arch`, for ahead-of-time compilation (kda-portability):
    per head dim (64-512) and dtype, the window kernel (128-token window, 64 MQA heads), the online kernel's dense
    causal and top-k gather launches, and the fused window + top-k launch in bf16."""
    G = 64
    w = window_arch_config(arch, G, 8192, 128)
    specs = []
    for dname, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        ptrs = {n: f"*{dname}" for n in ("q", "k", "v", "kc", "vc", "o")}
        ptrs.update(lse="*fp32", sink="*fp32")
        prec = dot_precision(dt)
        for D in (64, 128, 256, 512):
            ce = dict(STRIDE_KS=D, STRIDE_VS=D, HP=G, N_HG=1, BLOCK_T=1, BLOCK_M=w.block_m,
                      BLOCK_K=window_keys(128, w.block_m, G, 8192), BLOCK_D=min(D, w.block_d),
                      BLOCK_DV=min(D, w.block_dv), D=D, DV=D, HAS_SINK=True, HAS_KV_LENS=False, IS_VARLEN=False,
                      WRITE_PARTIAL=False, DOT_PRECISION=prec)
            specs.append(CompileSpec(f"fmha_window D{D} {dname}", _fmha_window_fwd_kernel,
                                     _signature(_fmha_window_fwd_kernel, ptrs), ce, w.num_warps, w.num_stages))
            modes = ("dense", "gather", "fused") if dname == "bf16" else ("dense", "gather")
            for mode in modes:
                cfg = arch_config(arch, D, G, None if mode != "dense" else 8192, mode != "dense",
                                  itemsize=dt.itemsize)
                hp = min(G, cfg.block_m)
                block_dv = min(D, cfg.block_dv or D)
                ce = dict(STRIDE_KS=D, STRIDE_VS=D, STRIDE_CS=D, STRIDE_WS=D, HP=hp, N_HG=G // hp,
                          BLOCK_T=1 if mode != "dense" else cfg.block_m // hp, BLOCK_M=cfg.block_m,
                          BLOCK_N=cfg.block_n, D=D, DV=D, BLOCK_DV=block_dv,
                          HAS_DENSE=mode != "gather", CAUSAL=mode != "gather", HAS_WINDOW=mode == "fused",
                          HAS_GATHER=mode != "dense", HAS_SINK=True, HAS_KV_LENS=False, HAS_C_LENS=False,
                          IS_VARLEN=False, SAME_KV=block_dv == D, SAME_KV_C=block_dv == D, NUM_SPLITS=1,
                          WRITE_PARTIAL=False,
                          REVERSE=mode != "gather", DOT_PRECISION=prec)
                specs.append(CompileSpec(f"fmha_{mode} D{D} {dname}", _fmha_attn_fwd_kernel,
                                         _signature(_fmha_attn_fwd_kernel, ptrs), ce, cfg.num_warps,
                                         cfg.num_stages))
    return specs

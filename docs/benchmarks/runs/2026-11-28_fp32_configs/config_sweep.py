"""Launch configurations of the fp32 backward's three pair-sensitive kernels, one at a time (2026-11-28).

    PYTHONPATH=. python docs/benchmarks/runs/2026-11-28_fp32_configs/config_sweep.py [--dtype fp32] \
        [--part 0 --parts 1] [--only gate]

A Kimi-flags fwd+bwd step (benchmarks.roofline.step) at B2 T8192 H32 K = V = 128 in fp32; each variant replaces one
kernel's table entry (the chunk-local backward's spanning form `intra_bwd_config`, the WY backward `wy_bwd_config`,
the gate cumsum / gate backward `gate_bwd_config`) and prints that kernel's CUDA time per step (torch.profiler, mean
of 5 steps after 3 warm-up steps) and the step's total. --part / --parts split the variants over GPUs.
"""
import argparse
import dataclasses

import torch

import triton_kda.gate as gate
import triton_kda.intra as intra
import triton_kda.wy as wy
from benchmarks.cases import TORCH_DTYPES
from benchmarks.roofline import kernel_times, step_inputs, step_shape
from triton_kda import chunk_kda
from triton_kda.configs import GateBwdConfig, IntraConfig

SPAN = [IntraConfig(16, 64, 32, 4, 3), IntraConfig(16, 64, 64, 4, 3), IntraConfig(16, 64, 32, 4, 2),
        IntraConfig(16, 64, 32, 4, 4), IntraConfig(16, 32, 32, 4, 3), IntraConfig(16, 32, 64, 4, 3),
        IntraConfig(16, 64, 32, 8, 3), IntraConfig(16, 64, 16, 4, 3), IntraConfig(16, 128, 32, 8, 3),
        IntraConfig(16, 64, 32, 4, 1)]
WY = [IntraConfig(16, 64, 64, 4, 1), IntraConfig(16, 64, 32, 4, 1), IntraConfig(16, 64, 64, 4, 2),
      IntraConfig(16, 64, 64, 8, 1), IntraConfig(16, 32, 64, 4, 1), IntraConfig(16, 128, 64, 8, 1)]
GATE = [GateBwdConfig(64, 4), GateBwdConfig(32, 4), GateBwdConfig(64, 8), GateBwdConfig(128, 8),
        GateBwdConfig(32, 2), GateBwdConfig(128, 4)]


def _fields(cfg) -> tuple:
    return tuple(cfg) if isinstance(cfg, tuple) else dataclasses.astuple(cfg)


def variants():
    base_span, base_wy, base_gate = intra.intra_bwd_config, wy.wy_bwd_config, gate.gate_bwd_config
    for cfg in SPAN:
        yield "span", "_kda_intra_bwd_span_kernel", cfg, (intra, "intra_bwd_config",
                                                          lambda a, K, V, span=False, split=False, c=cfg: c)
    for cfg in WY:
        yield "wy_bwd", "_kda_wy_bwd_kernel", cfg, (wy, "wy_bwd_config", lambda a, K, V, c=cfg: c)
    for cfg in GATE:
        yield "gate", "_kda_gate_", cfg, (gate, "gate_bwd_config", lambda a, K, c=cfg: c)
    intra.intra_bwd_config, wy.wy_bwd_config, gate.gate_bwd_config = base_span, base_wy, base_gate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="B2-T8192-H32")
    ap.add_argument("--dtype", default="fp32", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--only", default=None, help="span, wy_bwd or gate: that kernel's variants alone")
    args = ap.parse_args()
    d, do = step_inputs(step_shape(args.shape), TORCH_DTYPES[args.dtype])
    print(f"{torch.cuda.get_device_name()} {args.shape} {args.dtype}, Kimi flags")
    for i, (what, prefix, cfg, (mod, name, fn)) in enumerate(variants()):
        if i % args.parts != args.part or args.only not in (None, what):
            continue
        saved = getattr(mod, name)
        setattr(mod, name, fn)
        try:
            times = kernel_times(chunk_kda, d, do, steps=5)
        except Exception as exc:  # a variant this GPU cannot run is reported, not fatal
            print(f"{what} {_fields(cfg)} failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        finally:
            setattr(mod, name, saved)
        mine = {k: v for k, v in times.items() if k.startswith(prefix)}
        total = sum(v for k, v in times.items() if "kda" in k)
        print(f"{what} {_fields(cfg)} | " + " ".join(f"{k[:30]} {v:.1f}" for k, v in mine.items())
              + f" | kda total {total:.1f} us", flush=True)


if __name__ == "__main__":
    main()

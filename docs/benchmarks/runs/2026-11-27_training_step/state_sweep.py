"""Launch configurations of the state passes (`_kda_state_fwd_kernel`, `_kda_state_bwd_kernel`) against the table's,
timed as a user's bf16 step: `triton_kda.chunk_kda` with its default dispatch, Kimi Linear's flags.

    python3 docs/benchmarks/runs/2026-11-27_training_step/state_sweep.py [--shapes B2-T8192-H16-K256,...]

Each configuration replaces `triton_kda.state.state_config` (both passes, forward and backward, read it there) for
16-bit launches; a configuration that fails to compile or launch is reported as such. Times are do_bench medians
(ms) of the forward (no grad) and of forward + backward; one process, configurations alternating over two rounds.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
from triton.testing import do_bench

import triton_kda
import triton_kda.state as state
from triton_kda.configs import StateConfig

FLAGS = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
             use_beta_sigmoid_in_kernel=True)
CONFIGS = {  # (BV, warps, stages) per K; the first is the table's
    128: [(64, 4, 3), (64, 8, 3), (64, 8, 2), (32, 4, 3), (32, 8, 3)],
    256: [(32, 4, 1), (32, 8, 1), (64, 8, 1), (32, 8, 2), (64, 4, 1)],
}


def inputs(B, T, H, K):
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    d = dict(q=torch.randn(B, T, H, K, device=dev, dtype=dt), k=torch.randn(B, T, H, K, device=dev, dtype=dt),
             v=torch.randn(B, T, H, K, device=dev, dtype=dt), g=torch.randn(B, T, H, K, device=dev, dtype=dt),
             beta=torch.randn(B, T, H, device=dev, dtype=dt),
             A_log=torch.randn(H, device=dev, dtype=torch.float32) * 0.5,
             dt_bias=torch.randn(H * K, device=dev, dtype=torch.float32) * 0.5)
    for t in d.values():
        t.requires_grad_(True)
    return d, torch.randn(B, T, H, K, device=dev, dtype=dt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="B2-T8192-H16-K256,B2-T8192-H32-K128")
    args = ap.parse_args()
    table = state.state_config
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for text in args.shapes.split(","):
        dims = {x[0]: int(x[1:]) for x in text.split("-")}
        d, do = inputs(dims["B"], dims["T"], dims["H"], dims["K"])
        res = {}
        for _ in range(2):
            for cfg in CONFIGS[dims["K"]]:
                def patched(arch, K, V, es, narrow=False, pair_bwd=False, cfg=cfg):
                    if es != 2:
                        return table(arch, K, V, es, narrow, pair_bwd)
                    return StateConfig(BV=cfg[0], num_warps=cfg[1], num_stages=cfg[2])
                state.state_config = patched

                def fwd():
                    with torch.no_grad():
                        triton_kda.chunk_kda(**d, **FLAGS)

                def step():
                    o, _ = triton_kda.chunk_kda(**d, **FLAGS)
                    torch.autograd.backward(o, do)
                    for t in d.values():
                        t.grad = None
                try:
                    f, s = do_bench(fwd, warmup=10, rep=100), do_bench(step, warmup=5, rep=100)
                    res.setdefault(cfg, []).append((f, s))
                except Exception as exc:  # noqa: BLE001 - a configuration this GPU cannot run is a result
                    res[cfg] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    torch.cuda.synchronize()
        state.state_config = table
        print(f"\n{text}: BV / warps / stages | fwd ms | fwd+bwd ms | fwd+bwd / table")
        base = None
        for cfg, r in res.items():
            if isinstance(r, str):
                print(f"| {cfg} | {r} |")
                continue
            f = statistics.median(x[0] for x in r)
            s = statistics.median(x[1] for x in r)
            base = base or s
            print(f"| {cfg} | {f:.3f} | {s:.3f} | x{s / base:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

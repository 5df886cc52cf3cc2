"""The state kernels' V block where few programs run: `configs.state_narrow`'s 32-wide blocks against the table's
64-wide ones, side by side in one process (the rule is switched off by replacing `state_narrow` in the modules that
call it).

    python3 docs/benchmarks/scripts/state_blocks.py [--shapes B1-T8192-H16,...] [--rounds 3] [--profile]

Inputs and the step are `bwd_before_after.py`'s (Kimi Linear's flags, K = V = 128): bf16 forward+backward, and the
fp16 forward under no_grad (which runs the Triton state kernel; bf16's runs the compiled one). Prints one markdown row
per shape and mode: ms with the table's blocks, ms with the rule, their ratio and whether intra-card CP split the
sequences in each; `--profile` adds the state kernels' CUDA time per step. The last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bwd_before_after import inputs, kernel_times, step  # noqa: E402

from triton_kda import chunk_kda, configs, state, state_cp  # noqa: E402

DEFAULT = "B1-T8192-H16,B1-T4096-H32,B1-T16384-H32,B2-T8192-H32,B1-T32768-H8,B8-T2048-H32"
FLAGS = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
             use_beta_sigmoid_in_kernel=True)


def use_rule(on: bool) -> None:
    fn = configs.state_narrow if on else (lambda rows, V, device: False)
    state.state_narrow = fn
    state_cp.state_narrow = fn


def forward(d):
    with torch.no_grad():
        chunk_kda(**d, **FLAGS)


def split(B: int, T: int, H: int) -> int:
    return state_cp.piece_chunks((T,) * B, 64, H, 128, 128, 2, torch.device("cuda"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, {configs.sm_count(torch.device('cuda'))} SMs, "
          f"torch {torch.__version__}")
    print("| shape | mode | table ms | rule ms | rule / table | CP piece chunks (table / rule) |")
    print("|---|---|---:|---:|---:|---|")
    ratios = []
    for shape in args.shapes.split(","):
        B, T, H = (int(x[1:]) for x in shape.split("-"))
        for mode, dtype in (("fwd+bwd bf16", torch.bfloat16), ("fwd fp16", torch.float16)):
            d = inputs(B, T, H, dtype)
            do = torch.randn_like(d["v"])
            fn = (lambda d=d, do=do: step(chunk_kda, d, do)) if mode.startswith("fwd+bwd") else (lambda d=d: forward(d))
            times, pieces = {True: [], False: []}, {}
            for on in (False, True):
                use_rule(on)
                pieces[on] = split(B, T, H)
                fn()
            for _ in range(args.rounds):
                for on in (False, True):
                    use_rule(on)
                    times[on].append(do_bench(fn, warmup=50, rep=300, grad_to_none=list(d.values())))
            t = {on: statistics.median(v) for on, v in times.items()}
            ratios.append(t[True] / t[False])
            print(f"| B{B} T{T} H{H} | {mode} | {t[False]:.3f} | {t[True]:.3f} | {t[True] / t[False]:.3f} | "
                  f"{pieces[False]} / {pieces[True]} |", flush=True)
            if args.profile and mode.startswith("fwd+bwd"):
                for on in (False, True):
                    use_rule(on)
                    kt = kernel_times(chunk_kda, d, do)
                    st = {k: v for k, v in kt.items() if "state" in k}
                    print(f"  {'rule' if on else 'table'}: kernels {sum(kt.values()):.0f} us, state-pass kernels "
                          + ", ".join(f"{k[:40]} {v:.0f}" for k, v in sorted(st.items(), key=lambda x: -x[1])),
                          flush=True)
            use_rule(True)
            del d, do
            torch.cuda.empty_cache()
    geo = math.exp(statistics.mean(math.log(r) for r in ratios))
    print(f"summary: rule / table geomean {geo:.3f} over {len(ratios)} rows, "
          f"range {min(ratios):.3f}..{max(ratios):.3f}")


if __name__ == "__main__":
    main()

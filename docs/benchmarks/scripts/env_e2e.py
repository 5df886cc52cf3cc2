"""End-to-end fwd and fwd+bwd of chunk_kda (bf16, Kimi flags) under several environment settings, one fresh process
per (setting, shape); see NOTES.md.

Run on the device from the repo root:
    python3 docs/benchmarks/scripts/env_e2e.py [--shapes B,T,H[,HV] ...] [--env NAME=K1=V1,K2=V2 ...]
With TRITON_KDA_AUTOTUNE=1 in a setting, the configurations it picked are printed too (logger triton_kda.autotune).
"""
import argparse
import json
import logging
import os
import subprocess
import sys


def child(shape):
    sys.path.insert(0, os.getcwd())
    import torch
    import triton

    from triton_kda import chunk_kda

    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    B, T, H, HV = shape
    K = V = 128
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)
    leaves = [torch.randn(B, T, H, K, device=dev, dtype=bf), torch.randn(B, T, H, K, device=dev, dtype=bf),
              torch.randn(B, T, HV, V, device=dev, dtype=bf), torch.randn(B, T, HV, K, device=dev, dtype=bf),
              torch.randn(B, T, HV, device=dev, dtype=bf)]
    leaves = [x.requires_grad_(True) for x in leaves]
    args = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
                use_beta_sigmoid_in_kernel=True, A_log=torch.log(torch.rand(HV, device=dev) * 15 + 1),
                dt_bias=torch.randn(HV * K, device=dev) * 0.5)
    do = torch.randn(B, T, HV, V, device=dev, dtype=bf)

    def fwd():
        with torch.no_grad():
            chunk_kda(*leaves, **args)

    def fb():
        o, _ = chunk_kda(*leaves, **args)
        torch.autograd.grad(o, leaves, do)
    fwd()
    fb()
    bench = lambda f: triton.testing.do_bench(f, warmup=30, rep=200, return_mode="median")  # noqa: E731
    print(json.dumps(dict(fwd=round(bench(fwd), 3), fwdbwd=round(bench(fb), 3))), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["1,8192,32", "1,32768,32"])
    ap.add_argument("--env", nargs="+", default=["default="], help="NAME=K1=V1,K2=V2 (empty after NAME= for none)")
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        child(tuple(int(x) for x in a.child.split(",")))
        return
    for text in a.shapes:
        shape = [int(x) for x in text.split(",")]
        shape += [shape[2]] * (4 - len(shape))
        for setting in a.env:
            name, _, pairs = setting.partition("=")
            env = dict(os.environ, **dict(p.split("=", 1) for p in pairs.split(",") if p))
            out = subprocess.run([sys.executable, __file__, "--child", ",".join(map(str, shape))], env=env,
                                 capture_output=True, text=True, timeout=600)
            lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("{") or "autotuned" in ln]
            print(f"B{shape[0]}-T{shape[1]}-H{shape[2]}-HV{shape[3]} {name}: " + " | ".join(lines or [out.stderr[-300:]]),
                  flush=True)


if __name__ == "__main__":
    main()

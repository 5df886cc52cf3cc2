"""fwd+bwd time of ours with the flag sets and shapes where the chunk-local backward's split intra-chunk products
apply or not, for comparing two versions of the code (run once per version, same machine).

    python3 docs/benchmarks/scripts/split_cost.py [--rounds 3]

bf16: B2 T8192 H32 K=V=128 with Kimi's flags (the compiled backward's lower-bound gate: no split) and pre-gated
(split), B2 T8192 H16 K=V=256 pre-gated (the Triton backward, split). Prints one markdown row per case (median of
`do_bench` medians over the rounds) and which chunk-local backward ran; the last line is a summary.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())

from benchmarks.suites import FLAG_SETS  # noqa: E402
from reference.harness import make_inputs  # noqa: E402
from triton_kda import backends, chunk_kda  # noqa: E402

CASES = (("kimi", 2, 8192, 32, 128), ("pregated", 2, 8192, 32, 128), ("pregated", 2, 8192, 16, 256))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}")
    print("| flags | shape | fwd+bwd ms | chunk-local backward |\n|---|---|---:|---|")
    rows = []
    for flags, B, T, H, D in CASES:
        fs = FLAG_SETS[flags]
        d = make_inputs(B, T, H, H, D, D, dtype=torch.bfloat16, requires_grad=True, **fs.make_kwargs)
        kw = {**d, **fs.call_kwargs}
        leaves = [t for t in kw.values() if torch.is_tensor(t) and t.requires_grad]
        do = torch.randn_like(d["v"])

        def step(kw=kw, do=do):
            o, _ = chunk_kda(**kw)
            o.backward(do)

        backends.clear_backend_report()
        step()
        ran = sorted({e.name for e in backends.backend_report() if e.op == "kda_intra_bwd"}) or ["triton"]
        ms = statistics.median(do_bench(step, warmup=50, rep=300, grad_to_none=leaves) for _ in range(args.rounds))
        rows.append(f"{flags} B{B} T{T} H{H} K{D} {ms:.3f}")
        print(f"| {flags} | B{B} T{T} H{H} K=V={D} | {ms:.3f} | {', '.join(ran)} |", flush=True)
        del d, kw, leaves, do
        torch.cuda.empty_cache()
    print("summary: " + "; ".join(rows))


if __name__ == "__main__":
    main()

"""GPU: every gradient's relative RMSE vs the fp64 oracle with the compiled chunk-local backward (cuda_fast.sm90_bwd)
and with the Triton one, on tests/test_cuda_sm90_bwd.py's cases over several seeds (the tests hold one seed each).

    python3 docs/benchmarks/scripts/bwd_cuda_errors.py [--seeds 8]      (from the repo root)

Prints one row per case and seed (cuda error / triton error per gradient), then per gradient the median and the
largest cuda / triton ratio over all rows.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
from tests.test_chunk_bwd import _oracle_grads  # noqa: E402
from tests.test_cuda_sm90_bwd import CASE_IDS, CASES, _grads, _inputs  # noqa: E402
from tests.utils import rel_rmse  # noqa: E402

SWITCH = "TRITON_KDA_SM90_BWD"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    ratios = {}
    for case, cid in zip(CASES, CASE_IDS, strict=True):
        for seed in range(args.seeds):
            d, do, dht = _inputs(case, seed=seed)
            errs = {}
            for name, value in (("cuda", "1"), ("triton", "0")):
                os.environ[SWITCH] = value
                errs[name] = _grads(d, do, dht)
            ref = _oracle_grads(d, do, dht)
            row = []
            for g in ref:
                if g not in errs["cuda"]:
                    continue
                c, t = (rel_rmse(errs[n][g].double(), ref[g]) for n in ("cuda", "triton"))
                ratios.setdefault(g, []).append(c / t)
                row.append(f"d{g} {c:.2e}/{t:.2e}")
            print(f"{cid} seed{seed}: " + "  ".join(row), flush=True)
    print("summary (cuda / triton error): " + "  ".join(
        f"d{g} median {statistics.median(r):.2f} max {max(r):.2f}" for g, r in ratios.items()))


if __name__ == "__main__":
    main()

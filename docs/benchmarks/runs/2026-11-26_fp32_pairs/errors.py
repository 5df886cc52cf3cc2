"""fp32 errors of package copies (under .var/x) against the fp64 chunked oracle: Kimi flags, and a strong pre-gated
decay. python3 errors.py triton_kda_base,triton_kda_pairs [T]"""
import importlib
import sys

import torch

sys.path[:0] = [".var/x", "."]
from reference.harness import rel_rmse  # noqa: E402
from reference.kda import kda_chunk  # noqa: E402


def inputs(case: str, B: int, T: int, H: int, K: int, dev: str):
    gen = torch.Generator(device=dev).manual_seed(1)

    def rn(*s):
        return torch.randn(*s, generator=gen, device=dev, dtype=torch.float64)

    d = dict(q=rn(B, T, H, K), k=rn(B, T, H, K), v=rn(B, T, H, K),
             beta=torch.rand(B, T, H, generator=gen, device=dev, dtype=torch.float64))
    if case == "kimi":
        d["g"] = rn(B, T, H, K)
        d["A_log"] = torch.log(1 + 15 * torch.rand(H, generator=gen, device=dev, dtype=torch.float64))
        d["dt_bias"] = 0.1 * rn(H * K)
        kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0)
    else:
        d["g"] = -torch.rand(B, T, H, K, generator=gen, device=dev, dtype=torch.float64) * 2.0
        kw = dict(use_qk_l2norm_in_kernel=True)
    return d, kw, rn(B, T, H, K)


def main():
    names = sys.argv[1].split(",")
    T = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for case in ("kimi", "pregated-strong"):
        d, kw, do = inputs(case, 1, T, 4, 128, dev)
        ref_in = {n: t.clone().requires_grad_() for n, t in d.items()}
        o_ref = kda_chunk(**ref_in, **kw).o
        o_ref.backward(do)
        refs = {"o": o_ref.detach(), **{"d" + n: t.grad for n, t in ref_in.items()}}
        for name in names:
            x = {n: t.float().clone().requires_grad_() for n, t in d.items()}
            o, _ = importlib.import_module(name).chunk_kda(**x, **kw)
            o.backward(do.float())
            got = {"o": o.detach(), **{"d" + n: t.grad for n, t in x.items()}}
            print(case, name, " ".join(f"{k}={rel_rmse(got[k].double(), refs[k]):.2e}" for k in refs), flush=True)


if __name__ == "__main__":
    main()

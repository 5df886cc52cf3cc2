"""fp32 B1 T32768 H8 K=V=128, Kimi flags (the forward runs intra-card CP pieces): outputs and gradients of two package
copies (under .var/x) against each other and against the fp64 oracle. python3 cp_pieces_errors.py base,new"""
import importlib
import sys

import torch

sys.path[:0] = [".var/x", "."]
from reference.harness import rel_rmse  # noqa: E402
from reference.kda import kda_chunk  # noqa: E402


def main():
    B, T, H, K = 1, 32768, 8, 128
    gen = torch.Generator(device="cuda").manual_seed(2)

    def rn(*s):
        return torch.randn(*s, generator=gen, device="cuda", dtype=torch.float64)

    d = dict(q=rn(B, T, H, K), k=rn(B, T, H, K), v=rn(B, T, H, K), g=rn(B, T, H, K),
             beta=torch.rand(B, T, H, generator=gen, device="cuda", dtype=torch.float64),
             A_log=torch.log(1 + 15 * torch.rand(H, generator=gen, device="cuda", dtype=torch.float64)),
             dt_bias=0.1 * rn(H * K))
    kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0)
    do = rn(B, T, H, K)
    got = {}
    for name in sys.argv[1].split(","):
        x = {n: t.float().clone().requires_grad_() for n, t in d.items()}
        o, _ = importlib.import_module(name).chunk_kda(**x, **kw)
        o.backward(do.float())
        got[name] = {"o": o.detach().double(), **{"d" + n: t.grad.double() for n, t in x.items()}}
    a, b = list(got)
    print("pairs vs base:", " ".join(f"{k}={rel_rmse(got[b][k], got[a][k]):.1e}" for k in got[a]), flush=True)
    ref_in = {n: t.clone().requires_grad_() for n, t in d.items()}
    o_ref = kda_chunk(**ref_in, **kw).o
    o_ref.backward(do)
    refs = {"o": o_ref.detach(), **{"d" + n: t.grad for n, t in ref_in.items()}}
    for name in got:
        print(name, "vs fp64:", " ".join(f"{k}={rel_rmse(got[name][k], refs[k]):.1e}" for k in refs), flush=True)


if __name__ == "__main__":
    main()

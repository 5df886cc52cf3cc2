"""Is dA_log's error in its reduction or in its terms? Through the CPU interpreter (2026-11-28).

    TRITON_INTERPRET=1 PYTHONPATH=. python docs/benchmarks/runs/2026-11-28_dalog/reduction.py

kda-check's row B1 T40 H1 K = V = 16, fp32, l2norm + softplus gate in kernel, seeds 0-2, a random upstream gradient
of o: dA_log's relative error as our backward returns it, and as the fp64 sum of our own per-element terms (our dg
over d gate / d g, times d gate / d A_log, both in fp64), beside the sum's condition number (the oracle's sum of
|terms| over |sum|). Equal errors put the error in the terms, not the reduction.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from reference.harness import make_inputs  # noqa: E402
from reference.kda import kda_gate_ref, kda_recurrent  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402


def derivative(fn, x: torch.Tensor) -> torch.Tensor:
    """d fn / d x elementwise, where each output element depends on one input element (a JVP with ones)."""
    return torch.func.jvp(fn, (x,), (torch.ones_like(x),))[1]


def case(seed: int) -> str:
    names = ("q", "k", "v", "g", "beta", "A_log", "dt_bias")
    d = make_inputs(1, 40, 1, 1, 16, 16, device="cpu", use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                    seed=seed)
    flags = {k: v for k, v in d.items() if k not in names}
    ref = {n: d[n].double().requires_grad_(True) for n in names}
    o_ref, _ = kda_recurrent(**flags, **ref)
    do = torch.randn(o_ref.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).float().double()
    dA_ref = float(torch.autograd.grad(o_ref, [ref["A_log"]], do)[0])
    ours = {n: d[n].clone().requires_grad_(True) for n in names}
    o, _ = chunk_kda(**flags, **ours)
    dg, dA = torch.autograd.grad(o, [ours["g"], ours["A_log"]], do.float())
    g, A, dt = (d[n].double() for n in ("g", "A_log", "dt_bias"))
    dx = derivative(lambda x: kda_gate_ref(x, A, dt), g)
    da = derivative(lambda a: kda_gate_ref(g, a, dt), A)
    gate = kda_gate_ref(g, A, dt).requires_grad_(True)
    kept = {n: ref[n].detach() for n in ("q", "k", "v", "beta")}
    o_g, _ = kda_recurrent(**{**flags, "use_gate_in_kernel": False}, **kept, g=gate)
    terms = torch.autograd.grad(o_g, [gate], do)[0] * da
    cond = float(terms.abs().sum() / terms.sum().abs())
    ours_sum = float((dg.double() / dx * da).sum())
    return (f"seed {seed}: dA_log returned {abs(float(dA) - dA_ref) / abs(dA_ref):.2e}, fp64 sum of our terms "
            f"{abs(ours_sum - dA_ref) / abs(dA_ref):.2e}, condition number {cond:.0f}")


def main():
    torch.set_num_threads(1)
    for seed in range(3):
        print(case(seed), flush=True)

if __name__ == "__main__":
    main()

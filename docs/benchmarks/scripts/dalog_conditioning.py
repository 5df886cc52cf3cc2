"""Why kda-check's fp32 row B1-T40-H1-HV1-K16-V16 (l2norm + gate in kernel) has dA_log above 1e-5: the scalar's
conditioning and where the chunked backward's dg loses against the recurrence evaluated in fp32.

    TRITON_INTERPRET=1 python docs/benchmarks/scripts/dalog_conditioning.py

Prints: every gradient's rel RMSE vs fp64 for ours (chunk_kda, fp32) and for the fp64 oracle's code run in fp32;
kappa = sum|terms| / |dA_log| of dA_log = sum_{t,k} dgate * gate; and the ratio of the summed magnitudes of the
gate backward's parts (sum_{i>=m} |dE_i| + sum_{j<m} |dF_j|) to |dgate|: the cancellation inside dg."""
import torch
import torch.nn.functional as F

import reference.kda as RK
import triton_kda.intra as TI
from reference.harness import rel_rmse
from triton_kda import chunk_kda
from triton_kda.check import runner
from triton_kda.check.grid import CheckConfig

cfg = CheckConfig(1, 40, 1, 1, 16, 16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)
kw = runner._call_kwargs(cfg, torch.device("cpu"))
names = [n for n in runner.GRAD_NAMES if isinstance(kw.get(n), torch.Tensor) and kw[n].is_floating_point()]

ref_kw = runner._leaves(kw, names, torch.float64, True)
o_ref, _ = RK.kda_recurrent(**ref_kw)
up = runner.upstream_grads(cfg, {"o": o_ref}, torch.device("cpu"))[0]
ref = dict(zip(names, torch.autograd.grad(o_ref, [ref_kw[n] for n in names], up)))

captured = {}
gate_bwd = TI.gate_bwd


def spy(g, A_log, dt_bias, dE, dF, *args, **kwargs):
    captured["dE"], captured["dF"] = dE.clone(), dF.clone()
    return gate_bwd(g, A_log, dt_bias, dE, dF, *args, **kwargs)


TI.gate_bwd = spy
ours_kw = runner._leaves(kw, names, None, True)
o, _ = chunk_kda(**ours_kw)
ours = dict(zip(names, torch.autograd.grad(o, [ours_kw[n] for n in names], up.float())))

RK.F64 = torch.float32  # the oracle's own code, every operation in fp32
f32_kw = runner._leaves(kw, names, torch.float32, True)
o32, _ = RK.kda_recurrent(**f32_kw)
f32 = dict(zip(names, torch.autograd.grad(o32, [f32_kw[n] for n in names], up.float())))
RK.F64 = torch.float64

for n in names:
    print(f"d{n}: ours {rel_rmse(ours[n], ref[n]):.2e}, oracle in fp32 {rel_rmse(f32[n], ref[n]):.2e}")

A = ref_kw["A_log"].detach()
x = (ref_kw["g"] + ref_kw["dt_bias"].view(1, 1, 1, -1)).detach()
dgate = ref["g"] / (-A.exp() * torch.sigmoid(x))          # gradient w.r.t. the activated gate
terms = dgate * (-A.exp() * F.softplus(x))                 # dA_log = sum of these
print(f"dA_log {ref['A_log'].item():.6e}, sum|terms| {terms.abs().sum().item():.4e}, "
      f"kappa {(terms.abs().sum() / terms.sum().abs()).item():.1f}")
dE, dF = captured["dE"].double()[:, 0], captured["dF"].double()[:, 0]
parts = dE.abs().flip(0).cumsum(0).flip(0) + torch.cat([torch.zeros_like(dF[:1]), dF[:-1].abs().cumsum(0)])
print(f"dg parts / |dgate| (means): {(parts.mean() / dgate[0, :, 0].abs().mean()).item():.1f}")

"""Strict causality: changing tokens after position t leaves every output at positions <= t bit-identical."""
import pytest
import torch

from tests.utils import DEVICE, make_inputs
from triton_kda import chunk_kda


@pytest.mark.parametrize(
    "opts",
    [dict(gate="logsigmoid"), dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True),
     dict(gate="strong"), dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)],
    ids=["pregated", "safe_gate", "strong_gate", "softplus_gate_l2norm"],
)
@pytest.mark.parametrize("t", [20, 40, 70])
def test_future_tokens_do_not_change_past_outputs(opts, t):
    """T = 75 with chunk 64: t = 70 sits in a partly filled last chunk (the situation of
    fla-org/flash-linear-attention#1240)."""
    opts = dict(opts)
    safe_gate = opts.pop("safe_gate", False)
    d = make_inputs(1, 75, 1, 2, 16, 16, device=DEVICE, **opts)
    d["safe_gate"] = safe_gate
    o_ref, _ = chunk_kda(**d)
    gen = torch.Generator(device=DEVICE).manual_seed(t)
    for name in ("q", "k", "v", "g", "beta"):
        x = d[name].clone()
        noise = torch.randn(x[:, t + 1:].shape, generator=gen, device=DEVICE)
        x[:, t + 1:] = (noise * 3 - (5 if name == "g" else 0)).to(x.dtype)
        o, _ = chunk_kda(**{**d, name: x})
        assert torch.equal(o[:, : t + 1], o_ref[:, : t + 1]), f"output at <= {t} changed when {name} after {t} changed"

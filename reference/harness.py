"""Comparison metrics and input factories shared by the tests and the installed `kda-check` command.

- `rel_rmse`, `max_abs`: the error measures every check reports (computed in fp64).
- `make_inputs`: a seeded kwargs dict for `chunk_kda(**d)`, `kda_recurrent(**d)` and `kda_chunk(**d)`.
- `case_id`: a readable id for a parameter set, e.g. `B2-T130-H2-HV4-K64-V32-fp32`.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["GATE_MODES", "case_id", "make_inputs", "max_abs", "rel_rmse"]

GATE_MODES = ("logsigmoid", "safe", "strong", "raw", "masked")


def _pair(a: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if tuple(a.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: got {tuple(a.shape)}, reference has {tuple(ref.shape)}")
    return a.detach().to(device=ref.device, dtype=torch.float64), ref.detach().to(torch.float64)


def rel_rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    """`||a - ref|| / ||ref||` in fp64 (the absolute `||a - ref||` when `||ref|| == 0`). Shapes must match."""
    a, ref = _pair(a, ref)
    err = torch.linalg.vector_norm(a - ref).item()
    norm = torch.linalg.vector_norm(ref).item()
    return err / norm if norm > 0 else err


def max_abs(a: torch.Tensor, ref: torch.Tensor) -> float:
    """`max |a - ref|` in fp64 (0.0 for empty tensors). Shapes must match."""
    a, ref = _pair(a, ref)
    return (a - ref).abs().max().item() if a.numel() else 0.0


_DTYPE_NAMES = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_SHORT_KEYS = {"B", "T", "H", "HV", "K", "V", "N", "BT", "NT"}
_KEY_LABELS = {
    "use_qk_l2norm_in_kernel": "l2norm",
    "use_gate_in_kernel": "gate_in_kernel",
    "use_beta_sigmoid_in_kernel": "beta_sigmoid",
    "allow_neg_eigval": "neg_eigval",
    "state_v_first": "vfirst",
    "initial_state": "h0",
    "output_final_state": "ht",
    "lower_bound": "lb",
    "chunk_size": "BT",
}


def case_id(**params) -> str:
    """A readable test id from keyword parameters, in the order given, joined by '-'.

    Dimension names (B, T, H, HV, K, V, N, BT, NT) and chunk_size print as `B2`, `BT64`; dtypes as `fp32`/`bf16`;
    `gate` as its mode; True flags as a short label (`l2norm`, `gate_in_kernel`, `beta_sigmoid`, `neg_eigval`,
    `vfirst`, `h0`, `ht`); False and None are left out; lists as `seqlens=0,37,64`; anything else as `key=value`
    (lower_bound as `lb-5.0`). Example: `case_id(B=2, T=130, H=2, HV=4, K=64, V=32, dtype=torch.float32)` ->
    `B2-T130-H2-HV4-K64-V32-fp32`.
    """
    parts = []
    for key, value in params.items():
        label = _KEY_LABELS.get(key, key)
        if value is None or value is False:
            continue
        if value is True:
            parts.append(label)
        elif isinstance(value, torch.dtype):
            parts.append(_DTYPE_NAMES.get(value, str(value).removeprefix("torch.")))
        elif key == "gate":
            parts.append(str(value))
        elif key in _SHORT_KEYS or key in _KEY_LABELS:
            parts.append(f"{label}{value}")
        elif isinstance(value, (list, tuple)):
            parts.append(f"{label}=" + ",".join(str(x) for x in value))
        else:
            parts.append(f"{label}={value}")
    return "-".join(parts)


def make_inputs(
    B: int,
    T: int,
    H: int,
    HV: int,
    K: int,
    V: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    seqlens: list[int] | None = None,
    gate: str | None = None,
    use_gate_in_kernel: bool = False,
    lower_bound: float | None = None,
    use_beta_sigmoid_in_kernel: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    initial_state: bool = False,
    state_v_first: bool = False,
    output_final_state: bool = False,
    seed: int = 0,
    requires_grad: bool = False,
) -> dict:
    """Seeded KDA inputs as a kwargs dict for `chunk_kda(**d)`, `kda_recurrent(**d)` and `kda_chunk(**d)`.

    Shapes: q, k `[B, T, H, K]`; v `[B, T, HV, V]`; g `[B, T, HV, K]`; beta `[B, T, HV]`, all of `dtype`, drawn in fp32
    from a generator seeded with `seed` on `device` (default: "cuda" when available, else "cpu"), then cast.
    - q, k: randn, l2-normalised unless use_qk_l2norm_in_kernel (then raw randn).
    - beta: in (0, 1), or raw logits when use_beta_sigmoid_in_kernel.
    - gate (default "raw" when use_gate_in_kernel, else "logsigmoid"):
      "logsigmoid": logsigmoid(randn), typical decays; "safe": uniform in [lower_bound, 0) (lower_bound defaults to
      -5 here); "strong": logsigmoid, with a quarter of the (sequence, head, channel) lanes at -20..-60 per step
      (decayed to nothing within one step); "raw": randn raw gate input for use_gate_in_kernel (only there), with
      A_log `[HV]` (log of U(1, 16)) and dt_bias `[HV * K]` (inverse softplus of dt in [1e-3, 1e-1]), both fp32;
      "masked": raw gate input as fla's masked test draws it (only with use_gate_in_kernel): randn with half the
      entries -1000 (no decay there), A_log as "raw", dt_bias ~ randn, so the other steps decay strongly.
    - seqlens: varlen batch (B must be 1, T must equal sum(seqlens), zeros allowed): adds cu_seqlens `[N + 1]` int64
      on device and cu_seqlens_cpu.
    - initial_state: adds a randn fp32 state `[N, HV, K, V]` (`[N, HV, V, K]` if state_v_first).
    The dict also carries every flag given here (and lower_bound when set). requires_grad marks q, k, v, g, beta,
    initial_state, A_log and dt_bias as leaves that require grad.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    for name, value in (("B", B), ("H", H), ("HV", HV), ("K", K), ("V", V)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"make_inputs: `{name}` must be a positive int, got {value!r}")
    if HV % H != 0:
        raise ValueError(f"make_inputs: `HV` must be a multiple of `H`, got HV={HV}, H={H}")
    if gate is None:
        gate = "raw" if use_gate_in_kernel else "logsigmoid"
    if gate not in GATE_MODES:
        raise ValueError(f"make_inputs: `gate` must be one of {GATE_MODES}, got {gate!r}")
    if (gate in ("raw", "masked")) != use_gate_in_kernel:
        raise ValueError(
            f"make_inputs: gate modes 'raw' and 'masked' go with use_gate_in_kernel=True and only there, got "
            f"gate={gate!r}, "
            f"use_gate_in_kernel={use_gate_in_kernel}"
        )
    if seqlens is not None:
        if B != 1 or any(not isinstance(n, int) or n < 0 for n in seqlens) or not seqlens:
            raise ValueError(f"make_inputs: `seqlens` needs B == 1 and non-negative ints, got B={B}, {seqlens!r}")
        if T != sum(seqlens):
            raise ValueError(f"make_inputs: `T` must equal sum(seqlens) = {sum(seqlens)} in varlen mode, got {T}")
    N = len(seqlens) if seqlens is not None else B

    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, device=device, dtype=torch.float32)

    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, HV, V)
    if not use_qk_l2norm_in_kernel:
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    beta = randn(B, T, HV)
    if not use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta)

    d = {}
    if gate == "logsigmoid":
        g = F.logsigmoid(randn(B, T, HV, K))
    elif gate == "safe":
        lb = -5.0 if lower_bound is None else lower_bound
        g = lb * (1 - rand(B, T, HV, K))
    elif gate == "strong":
        g = F.logsigmoid(randn(B, T, HV, K))
        lanes = rand(B, 1, HV, K) < 0.25
        g = torch.where(lanes, -20 - 40 * rand(B, T, HV, K), g)
    elif gate == "masked":
        g = torch.where(rand(B, T, HV, K) < 0.5, -1000.0, randn(B, T, HV, K))
        d["A_log"] = torch.log(1 + 15 * rand(HV))
        d["dt_bias"] = randn(HV * K)
    else:
        g = randn(B, T, HV, K)
        d["A_log"] = torch.log(1 + 15 * rand(HV))
        dt = torch.exp(math.log(1e-3) + (math.log(1e-1) - math.log(1e-3)) * rand(HV * K))
        d["dt_bias"] = dt + torch.log(-torch.expm1(-dt))  # inverse softplus

    d = {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "g": g.to(dtype), "beta": beta.to(dtype), **d}
    if initial_state:
        d["initial_state"] = randn(N, HV, V, K) if state_v_first else randn(N, HV, K, V)
    if requires_grad:
        for name in ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias"):
            if name in d:
                d[name].requires_grad_(True)
    if seqlens is not None:
        cu = torch.tensor([0, *seqlens], dtype=torch.int64).cumsum(0)
        d["cu_seqlens"] = cu.to(device)
        d["cu_seqlens_cpu"] = cu
    if lower_bound is not None:
        d["lower_bound"] = lower_bound
    d.update(
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first,
    )
    return d

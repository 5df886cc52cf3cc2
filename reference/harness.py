"""Comparison metrics and input factories shared by the tests and the installed `kda-check` command.

- `rel_rmse`, `max_abs`: the error measures every check reports (computed in fp64); `rel_to_terms` the one kda-check
  judges the gate parameters' summed gradients by.
- `make_inputs`: a seeded kwargs dict for `chunk_kda(**d)`, `kda_recurrent(**d)` and `kda_chunk(**d)`.
- `case_id`: a readable id for a parameter set, e.g. `B2-T130-H2-HV4-K64-V32-fp32`.
- `GATE_REGIMES`, `LAYOUTS`, `regime_inputs`: the in-kernel gate's input regimes, the sweep over which tests, kda-check
  and `benchmarks.gate_regimes` hold our errors against fla's.
- `pooled_errors` (`case_errors`, then `pool`): every output and gradient of chunk_kda-like functions against the fp64
  oracle, pooled over cases; `ratio_spread`: the seed-to-seed spread of a pooled ratio of two functions' errors.
"""
from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

__all__ = ["GATE_MODES", "GATE_REGIMES", "LAYOUTS", "case_errors", "case_id", "cotangents", "environ", "make_inputs",
           "max_abs", "oracle_case", "oracle_case_and_terms", "pool", "pooled_errors", "ratio_spread", "regime_inputs",
           "rel_rmse", "rel_to_terms", "run_case"]

GATE_MODES = ("logsigmoid", "safe", "strong", "raw", "unsaturated", "masked")
_RAW_MODES = ("raw", "unsaturated", "masked")


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


def rel_to_terms(a: torch.Tensor, ref: torch.Tensor, terms: torch.Tensor) -> float:
    """`||a - ref|| / ||terms||` in fp64, for a gradient that sums many terms (dA_log, ddt_bias): `terms` the oracle's
    sum of |terms| per element (`reference.kda.kda_gate_terms`), the scale numerical analysis bounds a sum's rounding
    by. Unlike `rel_rmse` it does not grow with how much the terms cancel. Shapes must match."""
    a, ref = _pair(a, ref)
    norm = torch.linalg.vector_norm(terms.detach().to(torch.float64)).item()
    err = torch.linalg.vector_norm(a - ref).item()
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
      "unsaturated": randn raw gate input with A_log and dt_bias ~ 0.1 randn (only with use_gate_in_kernel): A is
      about 1, so the activation is far from saturating (with lower_bound -5 the log-decays spread over (-5, 0));
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
    if (gate in _RAW_MODES) != use_gate_in_kernel:
        raise ValueError(
            f"make_inputs: gate modes {_RAW_MODES} go with use_gate_in_kernel=True and only there, got "
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
    elif gate == "unsaturated":
        g = randn(B, T, HV, K)
        d["A_log"] = 0.1 * randn(HV)
        d["dt_bias"] = 0.1 * randn(HV * K)
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


# The in-kernel gate's input regimes: how the raw gate, A_log and dt_bias are drawn, and the activation's bound.
GATE_REGIMES = {
    "saturated": dict(gate="raw", lower_bound=-5.0),    # Kimi's draws: A (g + dt_bias) far below 0, gates near 0
    "unsaturated": dict(gate="unsaturated", lower_bound=-5.0),  # A about 1: log-decays spread over (-5, 0)
    "softplus": dict(gate="raw"),                       # -A softplus(g + dt_bias), no lower bound
    "masked": dict(gate="masked"),                      # fla's masked test: half the raw gates -1000, softplus
}
# Layouts of the sweep: one sequence per row with H = HV, and GVA (HV = 4 H) over ragged varlen with an empty
# sequence; both with an initial state and the final state's gradient.
LAYOUTS = {
    "heads": dict(B=1, T=512, H=4, HV=4),
    "gva_varlen": dict(B=1, T=512, H=2, HV=8, seqlens=[200, 0, 64, 248]),
}


def regime_inputs(regime: str, layout: str, dtype: torch.dtype, seed: int, *, K: int = 128, V: int = 128,
                  T: int | None = None, device: str | torch.device | None = None) -> dict:
    """`make_inputs` for one point of the gate-regime sweep: `GATE_REGIMES[regime]` drawn on `LAYOUTS[layout]`, with
    l2norm and the gate in the kernel, safe_gate where the gate has a lower bound, an fp32 initial state and the
    final state as output. K, V and T (None: the layout's; varlen lengths scaled to it) size it down for the
    interpreter."""
    if regime not in GATE_REGIMES:
        raise ValueError(f"regime_inputs: `regime` must be one of {sorted(GATE_REGIMES)}, got {regime!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"regime_inputs: `layout` must be one of {sorted(LAYOUTS)}, got {layout!r}")
    shape = dict(LAYOUTS[layout])
    if T is not None and T != shape["T"]:
        if "seqlens" in shape:
            lens = [n * T // shape["T"] for n in shape["seqlens"]]
            lens[-1] += T - sum(lens)
            shape["seqlens"] = lens
        shape["T"] = T
    gate = GATE_REGIMES[regime]
    d = make_inputs(shape.pop("B"), shape.pop("T"), shape.pop("H"), shape.pop("HV"), K, V, dtype=dtype, device=device,
                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, initial_state=True,
                    output_final_state=True, seed=seed, **gate, **shape)
    return d | {"safe_gate": gate.get("lower_bound") is not None}


# the inputs a chunk_kda call differentiates, where a case has them
LEAVES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def _leaves(d: dict) -> dict:
    return {n: d[n].detach().clone().requires_grad_(True) for n in LEAVES if torch.is_tensor(d.get(n))}


def _outputs_and_grads(o, ht, leaves: dict, do, dht) -> dict:
    """o, the final state (where the case outputs it: dht not None) and every leaf's gradient."""
    outs, cots = ([o, ht], [do, dht]) if dht is not None else ([o], [do])
    grads = torch.autograd.grad(outs, list(leaves.values()), [c.to(x.dtype) for c, x in zip(cots, outs, strict=True)])
    out = {"o": o.detach(), **({"ht": ht.detach()} if dht is not None else {})}
    return {**out, **{n: g for n, g in zip(leaves, grads, strict=True)}}


def run_case(fn: Callable, d: dict, do: torch.Tensor, dht: torch.Tensor | None) -> dict:
    """{"o", "ht" (where dht is given), and each leaf's name: its gradient} of `fn(**d)` (a chunk_kda-like function
    returning (o, final_state)) for the upstream gradients do (and dht)."""
    leaves = _leaves(d)
    o, ht = fn(**{**d, **leaves})[:2]
    return _outputs_and_grads(o, ht, leaves, do, dht)


def oracle_case(d: dict, do: torch.Tensor, dht: torch.Tensor | None) -> dict:
    """`run_case` of the fp64 recurrent oracle on fp64 copies of the case's leaves."""
    return oracle_case_and_terms(d, do, dht)[0]


def oracle_case_and_terms(d: dict, do: torch.Tensor, dht: torch.Tensor | None) -> tuple[dict, dict]:
    """(`oracle_case`, the oracle's sums of |terms| of the A_log and dt_bias gradients, `kda_gate_terms`, keyed by
    leaf name; empty without the in-kernel gate)."""
    from reference.kda import kda_gate_terms, kda_recurrent_gated

    ref = {k: v for k, v in d.items() if k not in ("safe_gate", "cu_seqlens_cpu")}
    leaves = {n: t.double().requires_grad_(True) for n, t in _leaves(d).items()}
    o, ht, gate = kda_recurrent_gated(**{**ref, **leaves})
    if gate is None:
        return _outputs_and_grads(o, ht, leaves, do, dht), {}
    got = _outputs_and_grads(o, ht, {**leaves, "gate": gate}, do, dht)
    dgate = got.pop("gate")
    return got, kda_gate_terms(dgate, leaves["g"], leaves.get("A_log"), leaves.get("dt_bias"), d.get("lower_bound"))


def cotangents(d: dict, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Seeded upstream gradients for case `d`: do (v's dtype) and, where the case outputs the final state, dht (fp32,
    the state's shape [N, HV, K, V]; else None)."""
    v = d["v"]
    gen = torch.Generator(device=v.device).manual_seed(1000 + seed)
    do = torch.randn(v.shape, generator=gen, device=v.device).to(v.dtype)
    if not d.get("output_final_state"):
        return do, None
    cu = d.get("cu_seqlens")
    N = cu.numel() - 1 if cu is not None else v.shape[0]
    return do, torch.randn(N, v.shape[2], d["q"].shape[3], v.shape[3], generator=gen, device=v.device)


def _put_env(pairs: dict[str, str | None]) -> None:
    for k, v in pairs.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def environ(pairs: dict[str, str | None]) -> Iterator[None]:
    """Set (None: unset) the environment variables `pairs` for the block, then restore what was there."""
    saved = {k: os.environ.get(k) for k in pairs}
    _put_env(pairs)
    try:
        yield
    finally:
        _put_env(saved)


def case_errors(cases: list[dict], fns: dict[str, Callable | None], envs: dict[str, dict[str, str]] | None = None,
                *, by_terms: bool = False) -> list[dict[str, dict[str, tuple[float, float]]]]:
    """Per case, {name: {tensor: (sum of squared errors, sum of squared references)}} of each function in `fns`
    (None entries skipped) against the fp64 oracle on every output and gradient. Case i gets `cotangents(case, i)`.
    `envs[name]`: environment variables set while that function runs forward and backward (say, a backend switch).
    by_terms: the A_log and dt_bias gradients' references are the oracle's sums of |terms| instead (`rel_to_terms`:
    their pooled errors then do not swing with how much a draw's terms cancel)."""
    names = [name for name, fn in fns.items() if fn is not None]
    out = []
    for i, d in enumerate(cases):
        do, dht = cotangents(d, i)
        ref, terms = oracle_case_and_terms(d, do, dht)
        scale = {n: terms[n] if by_terms and n in terms else r for n, r in ref.items()}
        sums = {}
        for name in names:
            with environ((envs or {}).get(name, {})):
                got = run_case(fns[name], d, do, dht)
            sums[name] = {n: (float((got[n].double() - r).square().sum()), float(scale[n].square().sum()))
                          for n, r in ref.items()}
        out.append(sums)
    return out


def pool(per_case: list[dict[str, dict[str, tuple[float, float]]]]) -> dict[str, dict[str, float]]:
    """{name: {tensor: relative RMSE}} pooled over `case_errors`' cases: the square root of the summed squared errors
    over the summed squared references."""
    acc: dict[str, dict[str, tuple[float, float]]] = {}
    for sums in per_case:
        for name, by in sums.items():
            for n, (e, r) in by.items():
                e0, r0 = acc.setdefault(name, {}).get(n, (0.0, 0.0))
                acc[name][n] = (e0 + e, r0 + r)
    return {name: {n: (e / r) ** 0.5 if r > 0 else e ** 0.5 for n, (e, r) in a.items()} for name, a in acc.items()}


def pooled_errors(cases: list[dict], fns: dict[str, Callable | None],
                  envs: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, float]]:
    """`pool(case_errors(cases, fns, envs))`: every output and gradient's relative RMSE pooled over `cases` (one
    seed's few elements of dA_log are too noisy to rank two kernels)."""
    return pool(case_errors(cases, fns, envs))


def ratio_spread(per_case: list[dict[str, dict[str, tuple[float, float]]]], ours: str, theirs: str,
                 tensor: str) -> float:
    """The seed-to-seed spread of the pooled error ratio `ours` / `theirs` on `tensor`: its jackknife standard error
    over `case_errors`' cases (each left out in turn), relative to the ratio. 0 with fewer than two cases."""
    n = len(per_case)
    if n < 2:
        return 0.0

    def ratio(cases):
        pooled = pool(cases)
        return pooled[ours][tensor] / pooled[theirs][tensor]

    full = ratio(per_case)
    loo = [ratio(per_case[:i] + per_case[i + 1:]) for i in range(n)]
    mean = sum(loo) / n
    return ((n - 1) / n * sum((x - mean) ** 2 for x in loo)) ** 0.5 / full

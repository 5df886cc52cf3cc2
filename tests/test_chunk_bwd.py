"""Backward of triton_kda.chunk_kda against autograd of the fp64 recurrent oracle (`kda_recurrent`).

Every gradient (q, k, v, g, beta, A_log, dt_bias, initial_state, with an incoming final-state gradient where the
final state is returned) is compared by relative RMSE on fresh seeded data; recompute and disable_recompute must
agree bit for bit, and so must two runs of the same call.
"""
import math

import pytest
import torch

import triton_kda.chunk_bwd
from reference.kda import kda_chunk, kda_recurrent
from tests.utils import DEVICE, assert_close, case_id, make_inputs, rel_rmse
from triton_kda import chunk_kda
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.configs import bwd_precision_of
from triton_kda.gate import gate_cumsum, gate_mode

LEAVES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")
TOL = {
    torch.float32: dict.fromkeys(LEAVES, 1e-5),
    torch.float16: dict(q=8e-3, k=8e-3, v=8e-3, g=2e-2, beta=2e-2, A_log=1e-2, dt_bias=1e-2, initial_state=1e-2),
}
TOL[torch.bfloat16] = TOL[torch.float16]
STATE = dict(initial_state=True, output_final_state=True)
IN_KERNEL = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
RAGGED = [13, 0, 40, 7, 33]


def _case(B=1, T=50, H=2, HV=2, K=16, V=16, chunk_size=32, **flags):
    return dict(B=B, T=T, H=H, HV=HV, K=K, V=V, chunk_size=chunk_size, **flags)


def _inputs(params: dict, dtype: torch.dtype, seed: int = 0) -> tuple[dict, int, bool]:
    """make_inputs(**params) with every tensor input a leaf that requires grad (beta fp32 with `beta_fp32`, no A_log
    with `no_a_log`); returns (chunk_kda kwargs, chunk_size, disable_recompute)."""
    params = dict(params)
    chunk_size = params.pop("chunk_size")
    no_a_log = params.pop("no_a_log", False)
    beta_fp32 = params.pop("beta_fp32", False)
    disable_recompute = params.pop("disable_recompute", False)
    d = make_inputs(**params, dtype=dtype, device=DEVICE, seed=seed)
    if no_a_log:
        del d["A_log"]
    if beta_fp32:
        d["beta"] = d["beta"].float()
    for name in LEAVES:
        if name in d:
            d[name].requires_grad_(True)
    return d, chunk_size, disable_recompute


def _cotangents(d: dict, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Incoming gradients: do [B, T, HV, V] in the input dtype; dht fp32 of the state's shape (the cases that return
    the final state also pass an initial state) or None."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 1)
    do = torch.randn(d["v"].shape, generator=gen, device=DEVICE).to(d["v"].dtype)
    dht = None
    if d["output_final_state"]:
        dht = torch.randn(d["initial_state"].shape, generator=gen, device=DEVICE)
    return do, dht


def _kernel_grads(d: dict, chunk_size: int, disable_recompute: bool, do, dht) -> dict:
    names = [n for n in LEAVES if n in d]
    o, ht = chunk_kda(**d, chunk_size=chunk_size, disable_recompute=disable_recompute)
    outputs, grads = [o], [do]
    if dht is not None:
        outputs.append(ht)
        grads.append(dht)
    return dict(zip(names, torch.autograd.grad(outputs, [d[n] for n in names], grads), strict=True))


def _oracle_grads(d: dict, do, dht) -> dict:
    names = [n for n in LEAVES if n in d]
    ref = {**d, **{n: d[n].detach().double().requires_grad_(True) for n in names}}
    o, ht = kda_recurrent(**ref)
    outputs, grads = [o], [do.double()]
    if dht is not None:
        outputs.append(ht)
        grads.append(dht.double())
    return dict(zip(names, torch.autograd.grad(outputs, [ref[n] for n in names], grads), strict=True))

FP32_CASES = [
    _case(),
    _case(**STATE),
    _case(T=70, K=32, V=32, chunk_size=64, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
          allow_neg_eigval=True),
    _case(use_gate_in_kernel=True, **STATE),
    _case(T=45, K=20, V=24, use_gate_in_kernel=True, lower_bound=-5.0, state_v_first=True, **STATE),
    _case(use_gate_in_kernel=True, lower_bound=-3.0, no_a_log=True),
    _case(B=2, T=70, H=1, HV=2, K=32, chunk_size=64, gate="strong", **STATE),
    _case(B=2, T=40, H=1, HV=4, gate="safe", lower_bound=-5.0, use_qk_l2norm_in_kernel=True, disable_recompute=True),
    _case(T=sum(RAGGED), H=2, HV=4, seqlens=RAGGED, **IN_KERNEL, **STATE),
    _case(T=sum(RAGGED), H=1, HV=2, seqlens=RAGGED, chunk_size=64, gate="strong", state_v_first=True,
          disable_recompute=True, **STATE),
    # several K and V slices per program; with the strong gate some K slices take the exact sums, others the anchored
    _case(T=90, H=1, HV=2, K=48, V=40, chunk_size=64, gate="strong", use_qk_l2norm_in_kernel=True, **STATE),
    _case(T=90, H=2, HV=4, K=48, V=40, **IN_KERNEL, lower_bound=-5.0, **STATE),
]
FP16_CASES = [
    _case(),
    _case(T=70, K=32, V=32, chunk_size=64, **IN_KERNEL, **STATE),
    _case(B=2, T=40, H=1, HV=2, gate="strong", beta_fp32=True, **STATE),
    _case(T=sum(RAGGED), H=2, HV=4, seqlens=RAGGED, **IN_KERNEL, lower_bound=-5.0, disable_recompute=True, **STATE),
]
GRID = [(p, torch.float32) for p in FP32_CASES] + [(p, torch.float16) for p in FP16_CASES]


@pytest.mark.parametrize("params,dtype", GRID, ids=[case_id(**p, dtype=dt) for p, dt in GRID])
def test_grads_match_oracle(params, dtype):
    d, chunk_size, disable_recompute = _inputs(params, dtype)
    do, dht = _cotangents(d, seed=0)
    got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
    ref = _oracle_grads(d, do, dht)
    assert set(got) == set(ref)
    for name, g in got.items():
        assert g.dtype == d[name].dtype, f"d{name}: dtype {g.dtype}, expected the input's {d[name].dtype}"
        assert_close(f"d{name}", g, ref[name], TOL[dtype][name])


MASKED = [_case(T=90, H=2, HV=4, K=32, V=16, seqlens=[40, 50], gate="masked", use_gate_in_kernel=True, **STATE)]
# fla's masked test in fp32: half the raw gates -1000 (no decay), the rest a strong softplus decay (A_log up to
# log 16). The gate gradients sum only terms whose decay spans each row (no large cancelling sums); measured on an
# AMD EPYC through the interpreter: dg 1.2e-6, dA_log 2.6e-6, ddt_bias 3.1e-6
MASKED_TOL = dict(TOL[torch.float32], g=3e-5, A_log=3e-5, dt_bias=3e-5)


@pytest.mark.parametrize("params", MASKED, ids=[case_id(**p, dtype=torch.float32) for p in MASKED])
def test_grads_match_oracle_masked_strong_decay(params):
    d, chunk_size, disable_recompute = _inputs(params, torch.float32)
    do, dht = _cotangents(d, seed=0)
    got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], MASKED_TOL[name])


SPREAD = [_case(T=80, H=2, HV=2, K=32, V=16, **STATE), _case(T=80, H=1, HV=2, K=32, V=16, use_qk_l2norm_in_kernel=True)]


@pytest.mark.parametrize("params", SPREAD, ids=[case_id(**p, dtype=torch.float32) for p in SPREAD])
def test_fp32_pairs_hold_rows_of_every_magnitude(params):
    """fp32 w, qg, kg travel as fp16 pairs with a power-of-two factor per row (wy.IntraOut): rows of q scaled by
    2^-20..2^20, of k by 2^-20..2^-1 and of v by 2^-12..2^12 (k small enough for a stable recurrence without l2norm)
    keep fp32 accuracy. Without the row factors they overflow or flush in fp16."""
    d, chunk_size, disable_recompute = _inputs(params, torch.float32)
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    B, T = d["q"].shape[:2]
    for name, lo, hi in (("q", -20, 20), ("k", -20, -1), ("v", -12, 12)):
        rows = torch.randint(lo, hi + 1, (B, T, d[name].shape[2], 1), generator=gen, device=DEVICE)
        d[name] = (d[name].detach() * torch.exp2(rows.float())).requires_grad_(True)
    do, dht = _cotangents(d, seed=0)
    got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], TOL[torch.float32][name])


EFORM = [FP32_CASES[3], FP32_CASES[8], FP32_CASES[10], MASKED[0]]


@pytest.mark.parametrize("params", EFORM, ids=[case_id(**p, dtype=torch.float32) for p in EFORM])
def test_gate_gradient_eform(params, monkeypatch):
    """bf16's chunk-local backward (`_kda_intra_bwd_kernel`, the gate gradient's E-form), run on fp32 inputs
    through the interpreter (bf16 does not run there). Measured on an AMD EPYC (`python
    docs/benchmarks/scripts/interp_grad_errors.py eform` at a24d737): at most 0.16 of each tolerance (dA_log 1.6e-6
    on the gate-in-kernel case); dg <= 1.4e-6, dA_log <= 1.9e-6, ddt_bias <= 3.0e-6 on the masked case."""
    monkeypatch.setattr(triton_kda.chunk_bwd, "bwd_precision_of",
                        lambda dtype, gate=0: bwd_precision_of(dtype, gate)._replace(gate_span=False))
    d, chunk_size, disable_recompute = _inputs(params, torch.float32)
    do, dht = _cotangents(d, seed=0)
    got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
    ref = _oracle_grads(d, do, dht)
    tol = MASKED_TOL if params in MASKED else TOL[torch.float32]
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], tol[name])


# where the intra-chunk sums' rounding dominates the gate gradient's error: pre-gated without a state, and the
# lower-bound gate unsaturated (log-decays over (-5, 0)) with one
SPLIT = [_case(T=128, K=32, V=32, chunk_size=64, use_qk_l2norm_in_kernel=True),
         _case(T=130, K=32, V=32, chunk_size=64, seqlens=[64, 66], use_qk_l2norm_in_kernel=True),
         _case(T=128, K=32, V=32, chunk_size=64, gate="unsaturated", use_qk_l2norm_in_kernel=True,
               use_gate_in_kernel=True, lower_bound=-5.0, **STATE)]


@pytest.mark.parametrize("params", SPLIT, ids=[case_id(**p, dtype=torch.float16) for p in SPLIT])
def test_eform_split_products(params, monkeypatch):
    """bf16's chunk-local backward precisions (`bwd_precision_of(torch.bfloat16, gate)`: the E-form, its intra-chunk
    sums with the B operands split in two TF32 products, the lower-bound gate's on the block's own tokens only), run on
    fp16 inputs through the interpreter: every gradient within fp16's tolerances, and dg at most half as far from fp64
    as with those sums on rounded TF32 operands (measured on an AMD EPYC: 0.18x and 0.14x, dg 4.1e-4 and 4.2e-4; the
    unsaturated lower-bound case on an Intel Xeon: 0.12x, dg 2.8e-4 against 2.4e-3)."""
    d, chunk_size, disable_recompute = _inputs(params, torch.float16)
    do, dht = _cotangents(d, seed=0)
    ref = _oracle_grads(d, do, dht)
    errors = {}
    split = bwd_precision_of(torch.bfloat16, gate_mode(d["use_gate_in_kernel"], d.get("lower_bound"))).intra
    for intra in (split, "tf32rn"):
        bf16 = bwd_precision_of(torch.bfloat16)._replace(intra=intra)
        monkeypatch.setattr(triton_kda.chunk_bwd, "bwd_precision_of", lambda dtype, gate=0, bf16=bf16: bf16)
        got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
        errors[intra] = rel_rmse(got["g"], ref["g"])
        if intra == split:
            for name, g in got.items():
                assert_close(f"d{name}", g, ref[name], TOL[torch.float16][name])
    assert errors[split] <= 0.5 * errors["tf32rn"], errors


@pytest.mark.gpu
@pytest.mark.parametrize("params", FP16_CASES, ids=[case_id(**p, dtype=torch.bfloat16) for p in FP16_CASES])
def test_grads_match_oracle_bf16(params):
    """bf16 has no interpreter support: GPU only, with the 16-bit tolerances (fp16's)."""
    test_grads_match_oracle(params, torch.bfloat16)


DETERMINISM = [
    _case(T=sum(RAGGED), H=1, HV=2, seqlens=RAGGED, **IN_KERNEL, **STATE),
    _case(B=2, T=70, H=1, HV=2, chunk_size=64, gate="strong", state_v_first=True, **STATE),
]


@pytest.mark.parametrize("dtype", [
    torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("params", DETERMINISM, ids=[case_id(**p) for p in DETERMINISM])
def test_recompute_and_repeat_bit_identical(params, dtype):
    """The backward's recompute (w, u, h, v_new from what the forward saved) gives the gradients of
    `disable_recompute` bit for bit, and a rerun repeats them."""
    d, chunk_size, _ = _inputs(params, dtype, seed=3)
    do, dht = _cotangents(d, seed=3)
    runs = [_kernel_grads(d, chunk_size, keep, do, dht) for keep in (False, True, False)]
    for other in runs[1:]:
        for name, g in runs[0].items():
            assert torch.equal(g, other[name]), f"d{name} differs between runs (recompute vs disable_recompute)"


def test_every_buffer_written(monkeypatch):
    """Every kernel output buffer starts as NaN: a gradient that still matches the oracle was written everywhere."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poison(empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poison(empty_like(*a, **kw)))
    params = _case(T=sum(RAGGED), H=1, HV=2, seqlens=RAGGED, **IN_KERNEL, **STATE)
    d, chunk_size, _ = _inputs(params, torch.float32, seed=5)
    do, dht = _cotangents(d, seed=5)
    got = _kernel_grads(d, chunk_size, False, do, dht)
    monkeypatch.undo()
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], TOL[torch.float32][name])


GATE_CASES = [
    _case(B=2, T=70, K=20, chunk_size=64, gate="strong"),
    _case(T=sum(RAGGED), H=1, HV=2, K=48, seqlens=RAGGED, use_gate_in_kernel=True),
    _case(T=45, K=20, use_gate_in_kernel=True, lower_bound=-5.0),
    _case(T=45, K=20, use_gate_in_kernel=True, lower_bound=-3.0, no_a_log=True),
]


@pytest.mark.parametrize("params", GATE_CASES, ids=[case_id(**p) for p in GATE_CASES])
def test_gate_cumsum_matches_chunk_oracle(params):
    """Stage: the backward's gate cumsum (log2 units; fp32 inputs: an fp32 pair hi + lo, hi G rounded to fp32)
    against the chunked fp64 oracle's g_cumsum."""
    d, chunk_size, _ = _inputs(params, torch.float32)
    cu = d.get("cu_seqlens")
    B, T, HV, K = d["g"].shape
    plan = plan_chunks(B, T, chunk_size, d["g"].device, cu.cpu() if cu is not None else None)
    got = gate_cumsum(d["g"].detach().reshape(B * T, HV, K), d.get("A_log"), d.get("dt_bias"), plan, chunk_size,
                      gate=gate_mode(d["use_gate_in_kernel"], d.get("lower_bound")), lower_bound=d.get("lower_bound"),
                      prec="tf32x3")
    ref = kda_chunk(**{n: x.detach() if isinstance(x, torch.Tensor) else x for n, x in d.items()},
                    chunk_size=chunk_size)
    assert got.shape == (2, B * T, HV, K) and got.dtype == torch.float32
    assert (got[1].abs() <= 2.0**-24 * got[0].abs() + 2.0**-149).all()  # hi is G to fp32's precision, lo the rest
    assert_close("G", got[0].double() + got[1].double(), ref.g_cumsum.reshape(B * T, HV, K) / math.log(2), 1e-6)


GPU_TABLE_CASES = [
    _case(T=70, K=16, V=16, chunk_size=64, **IN_KERNEL, lower_bound=-5.0, **STATE),
    _case(T=sum(RAGGED), H=1, HV=2, K=20, V=24, seqlens=RAGGED, gate="strong", **STATE),
]


@pytest.mark.parametrize("params", GPU_TABLE_CASES, ids=[case_id(**p) for p in GPU_TABLE_CASES])
def test_gpu_launch_table_through_interpreter(params, monkeypatch):
    """The sm_90 launch table's tiles (32 wide at least, so padded and masked for K, V < 32) give the oracle's
    gradients (through the recomputed forward); on this machine the kernels still run through the interpreter."""
    import triton_kda.intra
    import triton_kda.state
    import triton_kda.state_cp
    import triton_kda.wy

    for module in (triton_kda.intra, triton_kda.state, triton_kda.state_cp, triton_kda.wy):
        monkeypatch.setattr(module, "arch_of", lambda device: 90)
    d, chunk_size, _ = _inputs(params, torch.float32, seed=7)
    do, dht = _cotangents(d, seed=7)
    got = _kernel_grads(d, chunk_size, False, do, dht)
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], TOL[torch.float32][name])


def test_autotune_candidates_through_interpreter(monkeypatch):
    """TRITON_KDA_AUTOTUNE's path: every candidate of the intra forward, state forward and chunk-local backward runs
    (a fake timer makes the last candidate win, so the final launches use non-table configurations), and the
    gradients still match the oracle. The real timer needs a GPU; here the kernels run through the interpreter."""
    import itertools

    import triton.testing

    from triton_kda import configs

    clock = itertools.count(1000, -1)

    def fake_do_bench(fn, **kwargs):
        fn()
        return float(next(clock))

    monkeypatch.setattr(configs, "autotune_enabled", lambda: True)
    monkeypatch.setattr(configs, "_TUNED", {})
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    params = _case(T=70, K=32, V=32, chunk_size=64, **IN_KERNEL, lower_bound=-5.0, **STATE)
    d, chunk_size, _ = _inputs(params, torch.float32, seed=11)
    do, dht = _cotangents(d, seed=11)
    got = _kernel_grads(d, chunk_size, False, do, dht)
    assert {key[0] for key in configs._TUNED} == {"intra_fwd", "state_fwd", "intra_bwd"}
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        assert_close(f"d{name}", g, ref[name], TOL[torch.float32][name])


@pytest.mark.parametrize("grad_mode", [False, True], ids=["no_grad", "grad"])
def test_forward_saves_aux_only_for_a_backward(monkeypatch, grad_mode):
    """The forward writes the backward's aux outputs (Akk, row norms, beta) only when a backward can follow: under
    torch.no_grad inputs that require grad must not cost the aux stores."""
    import triton_kda.chunk_fwd

    seen = []
    real = triton_kda.chunk_fwd.intra_fwd

    def spy(*args, **kwargs):
        seen.append(kwargs["store_aux"])
        return real(*args, **kwargs)

    monkeypatch.setattr(triton_kda.chunk_fwd, "intra_fwd", spy)
    d, chunk_size, _ = _inputs(_case(), torch.float32)
    with torch.set_grad_enabled(grad_mode):
        o, _ = chunk_kda(**d, chunk_size=chunk_size)
    assert seen == [grad_mode]
    assert (o.grad_fn is not None) == grad_mode


def test_gate_parameter_grads_keep_their_shapes():
    """dt_bias may come as [HV, K] (validation counts elements): its gradient has that shape and the values of the
    flat [HV * K] case."""
    d, chunk_size, _ = _inputs(_case(use_gate_in_kernel=True, lower_bound=-5.0), torch.float32)
    do, _ = _cotangents(d, seed=0)
    flat = _kernel_grads(d, chunk_size, False, do, None)
    HV, K = d["g"].shape[2], d["g"].shape[3]
    d["dt_bias"] = d["dt_bias"].detach().reshape(HV, K).requires_grad_(True)
    square = _kernel_grads(d, chunk_size, False, do, None)
    assert square["dt_bias"].shape == (HV, K)
    assert torch.equal(square["dt_bias"].reshape(-1), flat["dt_bias"])

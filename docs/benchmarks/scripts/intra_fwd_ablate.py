"""GPU: time variants of the intra forward kernel, made by text edits of triton_kda/intra.py (ablations that remove a
part, and candidate rewrites), at B2 T8192 H32 K=V=128 bf16 with the Kimi flags; candidates' outputs are compared with
the unedited kernel's.

    PYTHONPATH=. python3 docs/benchmarks/scripts/intra_fwd_ablate.py [NAME ...]   (default: every variant)

An ablation's time is the kernel without that part (its outputs are wrong by design): base minus it is what the part
costs, up to what the compiler then removes or schedules differently.
"""
import dataclasses
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton

import triton_kda.chunk_fwd as cf
from triton_kda.configs import intra_config

SRC = Path(__file__).resolve().parents[3] / "triton_kda" / "intra.py"
R_LOOP = "for r in tl.static_range(NC):\n            b_Ga"
INVERSE = """    if PREC == "ieee":
        b_X = _finite_or_zero(_block_inverse(b_L, BT, BC, PREC))
    else:
        b_X = _finite_or_zero(_block_inverse_doubling(b_L, BT, PREC))"""
BATCHED = [
    ("""    b_Aqk = tl.zeros((BT, BT), dtype=tl.float32)
    b_L = tl.zeros((BT, BT), dtype=tl.float32)
    rng""", """    b_A3 = tl.zeros((NC, BC, BT), dtype=tl.float32)
    b_L3 = tl.zeros((NC, BC, BT), dtype=tl.float32)
    rng"""),
    ("""        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((tl.arange(0, NC) == r)[:, None], b_Ganc, 0.0), axis=0)
            b_kc = b_k * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX))
            b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kc, 0.0)
            b_kc = tl.trans(_op(b_kc, IS_BF16))
            rows = (blk == r)[:, None]
            b_Aqk += tl.dot(_op(tl.where(rows, b_qa, 0.0), IS_BF16), b_kc, input_precision=PREC)
            b_L += tl.dot(_op(tl.where(rows, b_ka, 0.0), IS_BF16), b_kc, input_precision=PREC)
""", """        b_kc = b_k[None, :, :] * tl.exp2(tl.minimum(b_Ganc[:, None, :] - b_G[None, :, :], RANGE_MAX))
        b_kc = tl.where(o_t[None, :, None] < (tl.arange(0, NC)[:, None, None] + 1) * BC, b_kc, 0.0)
        b_kc = tl.permute(_op(b_kc, IS_BF16), (0, 2, 1))
        b_A3 += tl.dot(_op(tl.reshape(b_qa, (NC, BC, BK)), IS_BF16), b_kc, input_precision=PREC)
        b_L3 += tl.dot(_op(tl.reshape(b_ka, (NC, BC, BK)), IS_BF16), b_kc, input_precision=PREC)
"""),
    ("""    for i_v in range(tl.cdiv(V, BV)):
        p_v = tl.make_block_ptr(v""", """    b_Aqk = tl.reshape(b_A3, (BT, BT))
    b_L = tl.reshape(b_L3, (BT, BT))
    for i_v in range(tl.cdiv(V, BV)):
        p_v = tl.make_block_ptr(v"""),
]
# safe-gate path (no exact rows): 2^(G_a(r) - G_j) = 2^(G_a(r) - G_a(c)) 2^(G_a(c) - G_j), one exp2 of the tile per slice
CHEAP_KC = [
    ("""        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((tl.arange(0, NC) == r)[:, None], b_Ganc, 0.0), axis=0)
            b_kc = b_k * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX))
            b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kc, 0.0)
""", """        if not EXACT_ROWS:
            b_kD = b_k * tl.exp2(-b_D)
        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((tl.arange(0, NC) == r)[:, None], b_Ganc, 0.0), axis=0)
            if EXACT_ROWS:
                b_kc = b_k * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX))
                b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kc, 0.0)
            else:
                b_F = tl.where((tl.arange(0, NC) <= r)[:, None], tl.exp2(b_Ga[None, :] - b_Ganc), 0.0)
                b_kc = b_kD * tl.reshape(tl.broadcast_to(b_F[:, None, :], (NC, BC, BK)), (BT, BK))
"""),
]
# the gate cumsum as a segmented scan over the [NC, BC, BK] view plus block offsets (gives D and the anchors too)
SEGSCAN = [
    ("""        b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                           HAS_A_LOG, HAS_DT_BIAS)
        o_k = i_k * BK + tl.arange(0, BK)
""", """        o_k = i_k * BK + tl.arange(0, BK)
        b_x, a = _gate_input(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, HV, K, BT, BK, HAS_A_LOG, HAS_DT_BIAS)
        if GATE > 0:
            b_x = kda_gate_act(b_x, a, lower_bound, GATE)
        b_x3 = tl.reshape(tl.where(m_t[:, None] & (o_k < K)[None, :], b_x, 0.0) * LOG2E, (NC, BC, BK))
        b_S3 = tl.cumsum(b_x3, axis=1)
        b_tot = tl.sum(b_x3, axis=1)
        b_first = tl.sum(tl.where(tl.arange(0, BC)[None, :, None] == 0, b_x3, 0.0), axis=1)
        b_pre = tl.cumsum(b_tot, axis=0) - b_tot
        b_G = tl.reshape(b_S3 + b_pre[:, None, :], (BT, BK))
"""),
    ("""        b_G3 = tl.reshape(b_G, (NC, BC, BK))
        b_Ganc = tl.sum(tl.where(tl.arange(0, BC)[None, :, None] == 0, b_G3, 0.0), axis=1)
        b_D = tl.reshape(b_G3 - b_Ganc[:, None, :], (BT, BK))
""", """        b_Ganc = b_pre + b_first
        b_D = tl.reshape(b_S3 - b_first[:, None, :], (BT, BK))
"""),
]
# the parked operands of w and u: each slice loaded before the previous slice's result is stored (a load may not
# pass a store to the same buffer, so otherwise every load's latency is exposed)
WU_PREFETCH = [("""    for i_k in tl.static_range(NK):
        p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_w = tl.dot(b_Xop, _op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16), input_precision=PREC)
        tl.store(p_w, b_w.to(p_w.dtype.element_ty), boundary_check=(0, 1))
    for i_v in tl.static_range((V + BV - 1) // BV):
        p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        b_u = tl.dot(b_Xop, _op(tl.load(p_u, boundary_check=(0, 1)), IS_BF16), input_precision=PREC)
        tl.store(p_u, b_u.to(p_u.dtype.element_ty), boundary_check=(0, 1))
""", """    NV: tl.constexpr = (V + BV - 1) // BV
    p_nxt = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
    for j in tl.static_range(NK + NV):
        p_cur, b_cur = p_nxt, b_nxt
        if j + 1 < NK:
            p_nxt = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, (j + 1) * BK), (BT, BK),
                                      (1, 0))
            b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
        elif j + 1 < NK + NV:
            p_nxt = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, (j + 1 - NK) * BV),
                                      (BT, BV), (1, 0))
            b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
        b_res = tl.dot(b_Xop, _op(b_cur, IS_BF16), input_precision=PREC)
        tl.store(p_cur, b_res.to(p_cur.dtype.element_ty), boundary_check=(0, 1))
""")]
NORM_UNROLL = [("""        for i_k in range(NK):
            p_q = tl.make_block_ptr(q""", """        for i_k in tl.static_range(NK):
            p_q = tl.make_block_ptr(q""")]
# the next K slice's q, k and raw gate loaded before this slice's stores (loop-carried; past K they are masked)
MAIN_PREFETCH = [("""    for i_k in range(NK):
        b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                           HAS_A_LOG, HAS_DT_BIAS)
        o_k = i_k * BK + tl.arange(0, BK)
        b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
        tl.store(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, b_Gl, mask=o_k < K)
        p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
        b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32)
""", """    p_qs = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_ks = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_gs = tl.make_block_ptr(g + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    b_qn = tl.load(p_qs, boundary_check=(0, 1))
    b_kn = tl.load(p_ks, boundary_check=(0, 1))
    b_gn = tl.load(p_gs, boundary_check=(0, 1))
    if HAS_A_LOG:
        a_gate = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    else:
        a_gate = 1.0
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        b_q = b_qn.to(tl.float32)
        b_k = b_kn.to(tl.float32)
        b_x = b_gn.to(tl.float32)
        p_qs = tl.advance(p_qs, (0, BK))
        p_ks = tl.advance(p_ks, (0, BK))
        p_gs = tl.advance(p_gs, (0, BK))
        b_qn = tl.load(p_qs, boundary_check=(0, 1))
        b_kn = tl.load(p_ks, boundary_check=(0, 1))
        b_gn = tl.load(p_gs, boundary_check=(0, 1))
        if HAS_DT_BIAS:
            b_x += tl.load(dt_bias + i_hv * K + o_k, mask=o_k < K, other=0.0).to(tl.float32)[None, :]
        if GATE > 0:
            b_x = kda_gate_act(b_x, a_gate, lower_bound, GATE)
        b_G = tl.cumsum(tl.where(m_t[:, None] & (o_k < K)[None, :], b_x, 0.0), axis=0) * LOG2E
        b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
        tl.store(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, b_Gl, mask=o_k < K)
""")]
# name -> (text edits, config overrides, call flag overrides)
VARIANTS = {
    "base": ([], {}, {}),
    "stages2": ([], {"num_stages": 2}, {}),
    "stages3": ([], {"num_stages": 3}, {}),
    "no_l2norm": ([], {}, {"use_qk_l2norm_in_kernel": False}),
    "pregated": ([], {}, {"use_gate_in_kernel": False, "lower_bound": None}),
    "no_block_products": ([(R_LOOP, R_LOOP.replace("(NC)", "(0)"))], {}, {}),
    "one_block_product": ([(R_LOOP, R_LOOP.replace("(NC)", "(1)"))], {}, {}),
    "identity_inverse": ([(INVERSE, "    b_X = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0) + b_L * 0.0")], {}, {}),
    "no_cumsum": ([("return tl.cumsum(tl.where(m_t[:, None] & m_k[None, :], b_g, 0.0), axis=0) * LOG2E",
                    "return tl.where(m_t[:, None] & m_k[None, :], b_g, 0.0) * LOG2E")], {}, {}),
    "wu_prefetch": (WU_PREFETCH, {}, {}),
    "norm_unroll": (NORM_UNROLL, {}, {}),
    "main_prefetch": (MAIN_PREFETCH, {}, {}),
    "all_prefetch": (WU_PREFETCH + NORM_UNROLL + MAIN_PREFETCH, {}, {}),
    "cheap_kc": (CHEAP_KC, {}, {}),
    "segscan": (SEGSCAN, {}, {}),
    "cheap_kc_segscan": (CHEAP_KC + SEGSCAN, {}, {}),
    "batched": (BATCHED, {}, {}),
    "batched_w8": (BATCHED, {"num_warps": 8}, {}),
    "warps8": ([], {"num_warps": 8}, {}),
    "bk64_w8": ([], {"BK": 64, "num_warps": 8}, {}),
}


def variant_kernel(name: str, edits: list, folder: Path):
    src = SRC.read_text()
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(f"{name}: edit target found {src.count(old)} times: {old[:60]!r}")
        src = src.replace(old, new)
    path = folder / f"intra_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"intra_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._kda_intra_fwd_kernel


def main(names: list[str]) -> None:
    dev = torch.device("cuda")
    B, T, H, HV, K, V, BT = 2, 8192, 32, 32, 128, 128, 64
    gen = torch.Generator(device=dev).manual_seed(0)
    q, k = (torch.randn(B * T, H, K, device=dev, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(B * T, HV, V, device=dev, generator=gen).bfloat16()
    g = torch.randn(B * T, HV, K, device=dev, generator=gen).bfloat16()
    beta = torch.randn(B * T, HV, device=dev, generator=gen).bfloat16()
    A_log = torch.log(torch.rand(HV, device=dev, generator=gen) * 15 + 1)
    dt_bias = torch.randn(HV * K, device=dev, generator=gen) * 0.5
    plan = cf.plan_chunks(B, T, BT, dev, None)
    kimi = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
    kernel, table = cf._kda_intra_fwd_kernel, cf.intra_config
    ref = None
    folder = Path(tempfile.mkdtemp(prefix="intra_ablate_"))
    print(f"GPU {torch.cuda.get_device_name()} triton {triton.__version__}; table config {intra_config(90, K, V)}")
    for name in names:
        edits, overrides, flags = VARIANTS[name]
        cf._kda_intra_fwd_kernel = variant_kernel(name, edits, folder) if edits else kernel
        cf.intra_config = lambda arch, K, V, o=overrides: dataclasses.replace(table(arch, K, V), **o)

        def run(fl={**kimi, **flags}):
            return cf.intra_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, plan, BT, **fl)

        try:
            out = run()
            torch.cuda.synchronize()
        except Exception as exc:
            print(f"{name:>20}: ERROR {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
        diff = ""
        if name == "base":
            ref = out
        elif ref is not None and not flags:
            worst = max(((getattr(out, n).float() - getattr(ref, n).float()).abs().max().item()
                         / max(getattr(ref, n).float().abs().max().item(), 1e-30), n)
                        for n in ("Aqk", "w", "u", "qg", "kg", "gl"))
            diff = f"  max |diff| / max |base| {worst[0]:.1e} ({worst[1]})"
        print(f"{name:>20}: {ms:.3f} ms{diff}", flush=True)
    cf._kda_intra_fwd_kernel, cf.intra_config = kernel, table


if __name__ == "__main__":
    main(sys.argv[1:] or list(VARIANTS))

"""GPU: time variants of the intra forward kernel, made by text edits of triton_kda/intra.py (ablations that remove a
part, and candidate rewrites), at B2 T8192 H32 K=V=128 bf16 with the Kimi flags; candidates' outputs are compared with
the unedited kernel's.

    PYTHONPATH=. python3 docs/benchmarks/scripts/intra_fwd_ablate.py [NAME ...]   (default: every variant)

Variants that were adopted or dropped are removed from VARIANTS; the commits named in docs/benchmarks/NOTES.md
hold the versions behind each quoted number. An ablation's time is the kernel without that part (its outputs are wrong by design): base minus it is what the part
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
import triton_kda.intra as ti
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
# name -> (text edits, config overrides, call flag overrides)
VARIANTS = {
    "base": ([], {}, {}),
    "stages2": ([], {"num_stages": 2}, {}),
    "stages3": ([], {"num_stages": 3}, {}),
    "no_l2norm": ([], {}, {"use_qk_l2norm_in_kernel": False}),
    "pregated": ([], {}, {"use_gate_in_kernel": False, "lower_bound": None}),
    "one_block_product": ([(R_LOOP, R_LOOP.replace("(NC)", "(1)"))], {}, {}),
    "identity_inverse": ([(INVERSE, "    b_X = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0) + b_L * 0.0")], {}, {}),
    "no_cumsum": ([("return tl.cumsum(tl.where(m_t[:, None] & m_k[None, :], b_x, 0.0), axis=0) * LOG2E",
                    "return tl.where(m_t[:, None] & m_k[None, :], b_x, 0.0) * LOG2E")], {}, {}),
    "cheap_kc": (CHEAP_KC, {}, {}),
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
    kernel, table = ti._kda_intra_fwd_kernel, ti.intra_config
    ref = None
    folder = Path(tempfile.mkdtemp(prefix="intra_ablate_"))
    print(f"GPU {torch.cuda.get_device_name()} triton {triton.__version__}; table config {intra_config(90, K, V)}")
    for name in names:
        edits, overrides, flags = VARIANTS[name]
        ti._kda_intra_fwd_kernel = variant_kernel(name, edits, folder) if edits else kernel
        ti.intra_config = lambda arch, K, V, o=overrides: dataclasses.replace(table(arch, K, V), **o)

        def run(fl={**kimi, **flags}):
            return ti.intra_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, plan, BT, **fl)

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
    ti._kda_intra_fwd_kernel, ti.intra_config = kernel, table


if __name__ == "__main__":
    main(sys.argv[1:] or list(VARIANTS))

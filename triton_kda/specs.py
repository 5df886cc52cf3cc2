"""Ahead-of-time compile specs: every (kernel, launch configuration) the dispatcher can pick on an architecture, built
from the launch tables in configs.py, for kda-portability (and its CI gate) to compile without a GPU."""
from __future__ import annotations

import torch

from triton_kda.configs import (
    CompileSpec,
    _kpad,
    bwd_precision_of,
    cdiv,
    cp_config,
    gate_bwd_config,
    gate_cumsum_config,
    intra_bwd_config,
    intra_config,
    pool_copy_config,
    precision_of,
    recurrent_bwd_config,
    recurrent_fwd_config,
    state_config,
    wy_bwd_config,
    wy_fwd_config,
)
from triton_kda.fmha.specs import fmha_compile_specs
from triton_kda.gate import _kda_gate_bwd_kernel, _kda_gate_cumsum_fwd_kernel, gate_cumsum_pair
from triton_kda.intra import _kda_intra_bwd_kernel, _kda_intra_bwd_span_kernel, _kda_intra_fwd_kernel
from triton_kda.pool import _kda_pool_gather_fwd_kernel, _kda_pool_scatter_fwd_kernel
from triton_kda.qk import _kda_qk_bwd_kernel
from triton_kda.recurrent import (
    _kda_recurrent_bwd_kernel,
    _kda_recurrent_fwd_kernel,
    _kda_recurrent_input_bwd_kernel,
)
from triton_kda.state import _kda_state_bwd_kernel, _kda_state_fwd_kernel
from triton_kda.state_cp import (
    _kda_state_cp_bwd_chain_kernel,
    _kda_state_cp_bwd_map_kernel,
    _kda_state_cp_fwd_chain_kernel,
    _kda_state_cp_fwd_map_kernel,
)
from triton_kda.wy import _kda_wy_bwd_kernel, _kda_wy_fwd_kernel

_DTYPES = {"bf16": ("bf16", True, torch.bfloat16), "fp16": ("fp16", False, torch.float16),
           "fp32": ("fp32", False, torch.float32)}


def compile_specs(arch: int) -> list[CompileSpec]:
    """Every (kernel, launch configuration) the dispatcher can pick on `arch`, for ahead-of-time compilation (the
    FMHA family's too)."""

    specs = []
    for K, V in ((64, 64), (128, 128), (256, 256)):
        for dname, (ty, is_bf16, dtype) in _DTYPES.items():
            prec, bp = precision_of(dtype), bwd_precision_of(dtype)
            bprec = bp.products
            gc_pair = gate_cumsum_pair(prec)
            for BT in (32, 64):
                ic = intra_config(arch, K, V)
                sig = {n: "*fp32" for n in ("gl", "rstd_q", "rstd_k", "beta_act")}
                sig.update({n: f"*{ty}" for n in ("q", "k", "v", "g", "beta", "w", "u", "qg", "kg")})
                sig["Aqk"] = sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"A_log": "*fp32", "dt_bias": "*fp32", "cu_seqlens": "*i64", "chunk_indices": "*i32",
                            "scale": "fp32", "lower_bound": "fp32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BC=ic.BC, BK=ic.BK, BV=ic.BV, USE_L2NORM=True, GATE=2,
                          HAS_A_LOG=True, HAS_DT_BIAS=True, BETA_SIGMOID=True, BETA_SCALE=1.0, STORE_AUX=True,
                          IS_BF16=is_bf16, PREC=prec, EXACT_ROWS=True, WY_OUT=True)
                specs.append(CompileSpec(f"intra_fwd K{K} V{V} BT{BT} {dname}", _kda_intra_fwd_kernel, sig, ce,
                                         ic.num_warps, ic.num_stages))
                if dtype == torch.float32:  # fp32 training forwards leave w, u, qg, kg and gl to the WY kernel
                    specs.append(CompileSpec(f"intra_fwd K{K} V{V} BT{BT} {dname} no-WY", _kda_intra_fwd_kernel, sig,
                                             dict(ce, WY_OUT=False), ic.num_warps, ic.num_stages))
                fc = wy_fwd_config(arch, K, V)
                sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "w", "u", "qg", "kg")}
                sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "rstd_q", "rstd_k", "beta_act", "gl", "rs")})
                sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "scale": "fp32", "lower_bound": "fp32"})
                pairs = dtype == torch.float32  # fp32 w, qg, kg as fp16 pairs (wy.IntraOut)
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BK=fc.BK, BV=fc.BV, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True,
                          IS_BF16=is_bf16, PREC=prec, PAIRS=pairs, UNIT_ROWS=True)
                specs.append(CompileSpec(f"wy_fwd K{K} V{V} BT{BT} {dname}", _kda_wy_fwd_kernel, sig, ce,
                                         fc.num_warps, fc.num_stages))
                if pairs:  # the pairs' row bounds from a pass over q and k (no in-kernel l2norm)
                    specs.append(CompileSpec(f"wy_fwd K{K} V{V} BT{BT} {dname} no-l2norm", _kda_wy_fwd_kernel, sig,
                                             dict(ce, UNIT_ROWS=False), fc.num_warps, fc.num_stages))
                es = 4 if dname == "fp32" else 2
                for narrow in (False, True):  # the half-wide blocks of launches with few rows, where they differ
                    sc = state_config(arch, K, V, es, narrow)
                    if narrow and sc == state_config(arch, K, V, es):
                        continue
                    tag = " narrow" if narrow else ""
                    sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "u", "o", "v_new", "h")}
                    sig.update({n: "*fp32" for n in ("gl", "rs", "h0", "ht", "ckpt")})
                    sig["ckpt_slot"] = "*i32"
                    sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
                    sig.update({"cu_seqlens": "*i64", "chunk_offsets": "*i64"})
                    ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=sc.BV, HAS_H0=True, STORE_O=True,
                              STORE_HT=True, STORE_H=True, STORE_VNEW=True, STORE_CKPT=True, V_FIRST=False,
                              IS_BF16=is_bf16, PREC=prec)
                    # fp32: plain w, qg, kg from the intra kernel (inference), fp16 pairs from the WY kernel
                    for pair in (False, True) if pairs else (False,):
                        specs.append(CompileSpec(f"state_fwd K{K} V{V} BT{BT} {dname}{tag}{' pairs' if pair else ''}",
                                                 _kda_state_fwd_kernel, sig, dict(ce, PAIRS=pair), sc.num_warps,
                                                 sc.num_stages))
                    bwd_sc = state_config(arch, K, V, es, narrow, pair_bwd=pairs)
                    sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "do")}
                    sig.update({n: "*fp32" for n in ("gl", "rs", "dht", "dv_new", "dh0")})
                    sig["dh"] = "*bf16" if is_bf16 else "*fp32"  # grad_state_dtype
                    sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
                    sig.update({"cu_seqlens": "*i64", "chunk_offsets": "*i64"})
                    ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=bwd_sc.BV, HAS_DHT=True, STORE_DH0=True,
                              V_FIRST=False, IS_BF16=is_bf16, PREC=bprec, PAIRS=pairs)
                    specs.append(CompileSpec(f"state_bwd K{K} V{V} BT{BT} {dname}{tag}", _kda_state_bwd_kernel, sig,
                                             ce, bwd_sc.num_warps, bwd_sc.num_stages))
                wc = wy_bwd_config(arch, K, V)
                sig = {n: f"*{ty}" for n in ("k", "v", "v_new", "do", "dv")}
                sig.update({n: "*fp32" for n in ("rstd_k", "beta_act", "h", "dv_new", "dvb", "dAqk", "dL", "dbeta_v")})
                sig["Gc"] = "*fp32"
                sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BK=wc.BK, BV=wc.BV, V_FIRST=False,
                          VIA_STATE=dtype == torch.float32, PREC=bprec)
                specs.append(CompileSpec(f"wy_bwd K{K} V{V} BT{BT} {dname}", _kda_wy_bwd_kernel, sig, ce,
                                         wc.num_warps, wc.num_stages))
                bc = intra_bwd_config(arch, K, V, bp.gate_span, bp.intra_state == "f16x3")
                sig = {n: f"*{ty}" for n in ("q", "k", "v_new", "do")}
                gate_terms = ("dD", "dW") if bp.gate_span else ("dE", "dF")
                sig.update({n: "*fp32" for n in ("gl", "rstd_q", "rstd_k", "beta_act", "dvb", "dAqk", "dL", "dq", "dk",
                                                 *gate_terms, "dbeta_k")})
                sig["Gc"] = sig["Gc_lo"] = "*fp32"
                sig["h"] = sig["dh"] = "*bf16" if is_bf16 else "*fp32"  # grad_state_dtype
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "scale": "fp32", "TT": "i32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BC=bc.BC, BK=bc.BK, BV=bc.BV, V_FIRST=False, PREC=bp.intra,
                          PREC_S=bp.intra_state, BF16_STATE=is_bf16)
                if bp.gate_span:
                    ce["GC_PAIR"] = gc_pair
                else:
                    del sig["Gc_lo"]
                kernel = _kda_intra_bwd_span_kernel if bp.gate_span else _kda_intra_bwd_kernel
                specs.append(CompileSpec(f"intra_bwd K{K} V{V} BT{BT} {dname}", kernel, sig, ce, bc.num_warps,
                                         bc.num_stages))
                lb = bwd_precision_of(dtype, 2).intra  # the lower-bound gate's intra-chunk products, where they differ
                if lb != bp.intra:
                    specs.append(CompileSpec(f"intra_bwd K{K} V{V} BT{BT} {dname} lower-bound", kernel, sig,
                                             dict(ce, PREC=lb), bc.num_warps, bc.num_stages))
                gc = gate_bwd_config(arch, K)
                sig = {"g": f"*{ty}", "dg": f"*{ty}"}
                sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "dD", "dW", "dA_log_part",
                                                 "ddt_bias_part")})
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "lower_bound": "fp32", "NT": "i32"})
                ce = dict(HV=8, K=K, BT=BT, BK=gc.BK, BC=bc.BC if bp.gate_span else 0, GATE=2, HAS_A_LOG=True,
                          HAS_DT_BIAS=True)
                specs.append(CompileSpec(f"gate_bwd K{K} BT{BT} {dname}", _kda_gate_bwd_kernel, sig, ce,
                                         gc.num_warps, 1))
                sig = {"g": f"*{ty}", "A_log": "*fp32", "dt_bias": "*fp32", "Gc": "*fp32", "Gc_lo": "*fp32",
                       "cu_seqlens": "*i64", "chunk_indices": "*i32", "lower_bound": "fp32"}
                gcs = gate_cumsum_config(arch, K, gc_pair)
                ce = dict(HV=8, K=K, BT=BT, BK=gcs.BK, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True, PREC=prec)
                specs.append(CompileSpec(f"gate_cumsum K{K} BT{BT} {dname}", _kda_gate_cumsum_fwd_kernel, sig, ce,
                                         gcs.num_warps, 1))
                specs += _cp_specs(arch, K, V, BT, dname, ty, is_bf16, prec, bprec)
            sig = {"x": f"*{ty}", "dx_part": "*fp32", "dx": f"*{ty}", "TT": "i32"}
            ce = dict(H=4, G=2, K=K, BT=32, BK=_kpad(K, arch), USE_L2NORM=True)
            specs.append(CompileSpec(f"qk_bwd K{K} {dname}", _kda_qk_bwd_kernel, sig, ce, 4, 1))
            specs += _recurrent_specs(arch, K, V, dname, ty)
    return specs + _pool_specs(arch) + fmha_compile_specs(arch)


def _recurrent_specs(arch: int, K: int, V: int, dname: str, ty: str) -> list[CompileSpec]:
    """The fused_recurrent_kda kernels (recurrent.py) of one (K, V, dtype): the forward with each V block the table
    picks (a small, a middle and a large batch), in its serving form (pool, per-token indices, accepted counts, in
    place), the reverse pass and the input-gradient kernel."""

    BK = _kpad(K, arch)
    flags = dict(H=4, HV=8, K=K, V=V, BK=BK, USE_L2NORM=True, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True,
                 BETA_SIGMOID=True, BETA_SCALE=1.0)
    tables = {"cu_seqlens": "*i64", "indices": "*i32", "num_accepted": "*i32"}
    ints = {n: "i32" for n in ("T", "TT", "stride_h0", "s_in", "s_it", "S_cols", "num_slots")}
    specs = []
    for heads in (1, cdiv(2 * 132, cdiv(V, 32)), 1 << 20):
        cfg = recurrent_fwd_config(arch, K, V, heads, 132)
        sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "beta")}
        sig.update({"A_log": "*fp32", "dt_bias": "*fp32", "h0": "*fp32", "o": f"*{ty}", "ht": "*fp32", **tables,
                    "scale": "fp32", "lower_bound": "fp32", **ints})
        ce = dict(flags, BV=cfg.BV, NV=cdiv(V, cfg.BV), HAS_H0=True, STORE_HT=False, INPLACE=True,
                  IS_VARLEN=True, IDX_MODE=2, HAS_ACCEPTED=True, V_FIRST=False)
        spec = CompileSpec(f"recurrent_fwd K{K} V{V} BV{cfg.BV} {dname}", _kda_recurrent_fwd_kernel, sig, ce,
                           cfg.num_warps, 1)
        if spec not in specs:
            specs.append(spec)
    bc = recurrent_bwd_config(arch, K, V)
    NV = cdiv(V, bc.BV)
    sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "beta")}
    sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "h0")})
    sig.update({"do": f"*{ty}", "dht": "*fp32", "dh0": "*fp32", "ckpt": "*fp32", "ck_offsets": "*i64", "dv": f"*{ty}"})
    sig.update({n: "*fp32" for n in ("dq_p", "dk_p", "dg_p", "db_p")})
    sig.update({**tables, "scale": "fp32", "lower_bound": "fp32", **ints, "stride_dh0": "i32"})
    sig = {n: sig[n] for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "do", "dht", "dh0", "ckpt",
                               "ck_offsets", "dv", "dq_p", "dk_p", "dg_p", "db_p", "cu_seqlens", "indices",
                               "num_accepted", "scale", "lower_bound", "T", "TT", "stride_h0", "stride_dh0", "s_in",
                               "s_it", "S_cols", "num_slots")}
    ce = dict(flags, BV=bc.BV, NV=NV, C=bc.C, HAS_H0=True, HAS_DHT=True, STORE_DH0=True, IS_VARLEN=True, IDX_MODE=0,
              HAS_ACCEPTED=False, V_FIRST=False)
    specs.append(CompileSpec(f"recurrent_bwd K{K} V{V} {dname}", _kda_recurrent_bwd_kernel, sig, ce, bc.num_warps, 1))
    sig = {n: f"*{ty}" for n in ("q", "k", "g", "beta")}
    sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "dq_p", "dk_p", "dg_p", "db_p")})
    sig.update({"dq": f"*{ty}", "dk": f"*{ty}", "dg": "*fp32", "dbeta": f"*{ty}", "dA_p": "*fp32", "scale": "fp32",
                "lower_bound": "fp32", "TT": "i32"})
    ce = dict({n: v for n, v in flags.items() if n != "V"}, G=2, NV=NV)
    specs.append(CompileSpec(f"recurrent_input_bwd K{K} {dname}", _kda_recurrent_input_bwd_kernel, sig, ce,
                             bc.input_warps, 1))
    return specs


def _pool_specs(arch: int) -> list[CompileSpec]:
    """The state-pool gather and scatter of chunk_kda (pool.py), at K = V = 128 with 8 v-heads."""

    BLOCK, num_warps = pool_copy_config(arch)
    specs = []
    for name, fn, src, dst in (("pool_gather", _kda_pool_gather_fwd_kernel, "pool", "h0"),
                               ("pool_scatter", _kda_pool_scatter_fwd_kernel, "ht", "pool")):
        sig = {src: "*fp32", "indices": "*i32", dst: "*fp32", "stride_pool": "i32", "num_slots": "i32"}
        specs.append(CompileSpec(name, fn, sig, dict(KV=8 * 128 * 128, BLOCK=BLOCK), num_warps, 1))
    return specs


def _cp_specs(arch: int, K: int, V: int, BT: int, dname: str, ty: str, is_bf16: bool, prec: str,
              bprec: str) -> list[CompileSpec]:
    """The four intra-card CP kernels (state_cp.py) of one (K, V, BT, dtype); the chain kernels once, at BT 64.
    prec / bprec: the forward's / backward's product precision."""

    cc = cp_config(arch, K, V, 4 if dname == "fp32" else 2, is_bf16, BT)
    tables = {n: "*i64" for n in ("cu_seqlens", "chunk_offsets", "seq_pieces")}
    tables.update({"piece_seq": "*i32", "map_pieces": "*i32"})
    ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BC=cc.BC, NKB=cdiv(K, cc.BC), V_FIRST=False,
              IS_BF16=is_bf16, PREC=prec)
    sig = {n: f"*{ty}" for n in ("kg", "w", "u")}
    sig.update({n: "*fp32" for n in ("gl", "rs", "h0", "maps")}, **tables)
    pairs = dname == "fp32"  # fp32 kg, w as fp16 pairs from the WY kernel (training), or plain (inference)
    specs = [CompileSpec(f"cp_fwd_map K{K} V{V} BT{BT} {dname}{' pairs' if pair else ''}",
                         _kda_state_cp_fwd_map_kernel, sig,
                         dict(ce, HAS_H0=True, PAIRS=pair, PREFETCH=cc.fwd_stages > 1), cc.fwd_warps, cc.fwd_stages)
             for pair in ((False, True) if pairs else (False,))]
    sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "Aqk", "do")}
    sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
    sig.update({n: "*fp32" for n in ("gl", "rs", "dht", "maps")}, **tables)
    specs.append(CompileSpec(f"cp_bwd_map K{K} V{V} BT{BT} {dname}", _kda_state_cp_bwd_map_kernel, sig,
                             dict(ce, HAS_DHT=True, PREC=bprec, PAIRS=pairs, PREFETCH=cc.bwd_stages > 1),
                             cc.bwd_warps, cc.bwd_stages))
    if BT == 64:
        ce = dict(HV=8, K=K, V=V, BK=_kpad(K, arch), BV=cc.chain_BV, BKC=cc.chain_BKC, V_FIRST=False)
        for name, fn, state in (("cp_fwd_chain", _kda_state_cp_fwd_chain_kernel, ("h0", "init", "HAS_H0")),
                                ("cp_bwd_chain", _kda_state_cp_bwd_chain_kernel, ("dht", "dend", "HAS_DHT"))):
            sig = {"maps": "*fp32", state[0]: "*fp32", state[1]: "*fp32", "seq_pieces": "*i64"}
            specs.append(CompileSpec(f"{name} K{K} V{V} {dname}", fn, sig, dict(ce, **{state[2]: True}),
                                     cc.chain_warps, 1))
    return specs

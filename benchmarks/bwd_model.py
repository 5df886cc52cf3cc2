"""Floors of the bf16 training step's designs (forward + backward) for a shape and a card, kernel by kernel: DRAM
bytes, tensor-core FLOPs and the state chains (docs/design.md, "A fused Hopper backward").

    python -m benchmarks.bwd_model [--shape B2-T8192-H32[-HV64][-K256] ...] [--card H100|H200]
                                   [--tbps X] [--tflops Y] [--sms N] [--design split|fused]

Designs, as lists of kernels with the tensors each reads and writes once:
- "split", the step of today (Kimi flags, bf16, default dispatch; docs/benchmarks/runs/2026-11-27_step_kernels): the
  forward's intra and state kernels save Aqk, Akk and the row norms; the backward recomputes w, u, qg, kg (WY
  recompute) and the per-chunk states h with v_new (a second state-forward launch), runs the reverse state pass
  (dh, dv_new), the WY backward (dv, dvb, dAqk, dL) and the compiled chunk-local backward (dq, dk, dg, dbeta), and
  with GVA the q/k backward that sums its fp32 per-v-head partials over each group.
- "fused", the design of docs/design.md: the fused forward also writes h, v_new, Aqk and Akk; a reverse state pass
  forms qg, kg and w on chip from q, k, g, beta and Akk and writes dh and dv_new; one chunk-local backward reads the
  inputs, h, dh, v_new, dv_new, do and Akk and writes every gradient, its gate reductions and GVA sums inside.

A kernel's byte floor is its bytes at the copy bandwidth, its FLOP floor its products at the bf16 matmul rate
(element-wise work left out), its chain floor (state passes) the dependent steps of one 64-row V slice of a
sequence's state, two products per step on one SM as in `benchmarks.fwd_model`. The step's floor sums its kernels'
floors (each the largest of the three): kernels run one after another.
"""
from __future__ import annotations

import argparse
import math
from typing import NamedTuple

from benchmarks.fwd_model import BT, M_SLICE, add_card_args, card_rates, seq_lengths, shape_name
from benchmarks.model import DTYPE_BYTES
from benchmarks.suites import Shape, parse_shape

DESIGNS = ("split", "fused")


def tensor_bytes(shape: Shape) -> dict[str, int]:
    """Bytes of each tensor a step moves, over the shape's tokens: inputs and gradients in the input dtype, states
    h / dh in `state.grad_state_dtype` (bf16 for bf16 inputs, else fp32), the backward's work tensors in fp32."""
    e = DTYPE_BYTES[shape.dtype]
    se = 2 if shape.dtype == "bf16" else 4
    ae = e if shape.dtype == "bf16" else 4  # Aqk, Akk: bf16 for bf16 inputs, else fp32
    lens = seq_lengths(shape)
    tok, nt = sum(lens), sum(math.ceil(n / BT) for n in lens)
    H, HV, K, V = shape.H, shape.HV, shape.K, shape.V
    out = dict(q=tok * H * K * e, k=tok * H * K * e, dq=tok * H * K * e, dk=tok * H * K * e,
               beta=tok * HV * e, dbeta=tok * HV * e, rows=3 * tok * HV * 4,  # rstd_q, rstd_k, activated beta
               Aqk=tok * HV * BT * ae, Akk=tok * HV * BT * ae, dAqk=tok * HV * BT * 4, dL=tok * HV * BT * 4,
               gl=nt * HV * K * 4, h=nt * HV * K * V * se, dh=nt * HV * K * V * se,
               dq_part=tok * HV * K * 4, dk_part=tok * HV * K * 4, dv_new=tok * HV * V * 4, dvb=tok * HV * V * 4)
    out.update({n: tok * HV * K * e for n in ("g", "dg", "qg", "kg", "w")})
    out.update({n: tok * HV * V * e for n in ("v", "o", "do", "dv", "u", "v_new")})
    return out


class Kernel(NamedTuple):
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    flops_per_token_head: int
    chain: bool = False  # a state pass: one dependent step per chunk


def kernels(shape: Shape, design: str) -> list[Kernel]:
    """The kernels of one training step of `design` for `shape`, in launch order."""
    if design not in DESIGNS:
        raise ValueError(f"kernels: design must be one of {DESIGNS}, got {design!r}")
    K, V = shape.K, shape.V
    kv, bk, bv = 2 * K * V, 2 * BT * K, 2 * BT * V
    inv = 2 * BT * BT // 3                  # (I + L)^-1 of a chunk, per token
    intra = 2 * bk + bk + bv + inv          # Aqk, Akk, then w = Akk kb and u = Akk (beta v)
    state_fwd = 3 * kv + bv                 # v_new = u - w S, o = qg S + Aqk v_new, S += kg^T v_new
    state_bwd = 3 * kv + bv                 # dv_new = kg dh + Aqk^T do, dh += qg^T do - w^T dv_new
    wy_bwd = 4 * bv                         # dAqk = do v_new^T, dvb = Akk^T dv_new, dL, dA through v_new
    local_bwd = 3 * kv + 4 * bk             # do S^T, v_new dS^T, dvb S^T; the intra sums Rq, RL, C (two)
    ins = ("q", "k", "v", "g", "beta")
    gva = shape.HV > shape.H
    if design == "split":
        steps = [
            Kernel("intra forward", ins, ("Aqk", "Akk", "w", "u", "qg", "kg", "gl", "rows"), intra),
            Kernel("state forward", ("qg", "kg", "w", "u", "Aqk", "gl"), ("o",), state_fwd, True),
            Kernel("WY recompute", ("q", "k", "v", "g", "rows", "Akk"), ("w", "u", "qg", "kg", "gl"), bk + bv),
            Kernel("state recompute", ("qg", "kg", "w", "u", "Aqk", "gl"), ("h", "v_new"), 2 * kv, True),
            Kernel("state backward", ("qg", "kg", "w", "do", "Aqk", "gl"), ("dh", "dv_new"), state_bwd, True),
            Kernel("WY backward", ("v", "v_new", "do", "dv_new", "Akk", "rows"), ("dv", "dvb", "dAqk", "dL", "dbeta"),
                   wy_bwd),
            Kernel("chunk-local backward", ("q", "k", "g", "h", "dh", "v_new", "dvb", "do", "dAqk", "dL", "gl", "rows"),
                   ("dq_part", "dk_part", "dg", "dbeta") if gva else ("dq", "dk", "dg", "dbeta"), local_bwd),
        ]
        if gva:
            steps.append(Kernel("q/k backward", ("q", "k", "dq_part", "dk_part"), ("dq", "dk"), 0))
        return steps
    return [
        Kernel("fused forward", ins, ("o", "h", "v_new", "Aqk", "Akk", "gl", "rows"), intra + state_fwd, True),
        Kernel("reverse state pass", ("q", "k", "g", "beta", "Akk", "Aqk", "do", "gl", "rows"), ("dh", "dv_new"),
               bk + state_bwd, True),
        Kernel("chunk-local backward", ins + ("h", "dh", "v_new", "dv_new", "do", "Akk", "gl", "rows"),
               ("dq", "dk", "dv", "dg", "dbeta"), wy_bwd + local_bwd),
    ]


class KernelFloor(NamedTuple):
    name: str
    bytes: int
    flops: float
    byte_us: float
    flop_us: float
    chain_us: float

    @property
    def floor_us(self) -> float:
        return max(self.byte_us, self.flop_us, self.chain_us)


def floors(shape: Shape, design: str, tbps: float, tflops: float, sms: int) -> list[KernelFloor]:
    """`KernelFloor` of each kernel of `design` for `shape` on a card with copy bandwidth `tbps` TB/s, bf16 matmul
    rate `tflops` TFLOP/s and `sms` SMs."""
    size = tensor_bytes(shape)
    lens = seq_lengths(shape)
    token_heads = sum(lens) * shape.HV
    steps = max(math.ceil(n / BT) for n in lens)
    chain_us = steps * 2 * (2 * M_SLICE * BT * shape.K) / (tflops * 1e12 / sms) * 1e6
    out = []
    for k in kernels(shape, design):
        nbytes = sum(size[t] for t in k.reads + k.writes)
        flops = float(k.flops_per_token_head * token_heads)
        out.append(KernelFloor(k.name, nbytes, flops, nbytes / (tbps * 1e12) * 1e6, flops / (tflops * 1e12) * 1e6,
                               chain_us if k.chain else 0.0))
    return out


def table(shapes: list[Shape], designs: tuple[str, ...], tbps: float, tflops: float, sms: int) -> list[str]:
    """Markdown rows: per shape, design and kernel, MB, GFLOP and floors; a total row per design."""
    lines = ["| shape | design | kernel | MB | GFLOP | byte floor us | FLOP floor us | chain floor us | floor us |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in shapes:
        name = shape_name(s)
        for design in designs:
            fl = floors(s, design, tbps, tflops, sms)
            for f in fl:
                lines.append(f"| {name} | {design} | {f.name} | {f.bytes / 1e6:.0f} | {f.flops / 1e9:.1f} | "
                             f"{f.byte_us:.0f} | {f.flop_us:.0f} | {f.chain_us:.0f} | {f.floor_us:.0f} |")
            lines.append(f"| {name} | {design} | **step** | {sum(f.bytes for f in fl) / 1e6:.0f} | "
                         f"{sum(f.flops for f in fl) / 1e9:.1f} | {sum(f.byte_us for f in fl):.0f} | "
                         f"{sum(f.flop_us for f in fl):.0f} | {sum(f.chain_us for f in fl):.0f} | "
                         f"**{sum(f.floor_us for f in fl):.0f}** |")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bwd_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=None,
                   help="B2-T8192-H32[-HV64][-K256][-V256] (repeatable; default: B2-T8192-H32)")
    p.add_argument("--design", choices=DESIGNS, action="append", default=None, help="default: both")
    add_card_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tbps, tflops, sms = card_rates(args)
    shapes = [parse_shape(t) for t in (args.shape or ["B2-T8192-H32"])]
    print(f"{args.card}: copy {tbps} TB/s, bf16 matmul {tflops} TFLOP/s, {sms} SMs; chunk {BT}, chain slice {M_SLICE}")
    print("\n".join(table(shapes, tuple(args.design or DESIGNS), tbps, tflops, sms)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Floors of the chunk_kda inference forward's designs for a shape and a card: DRAM bytes, tensor-core FLOPs and the
recurrence's dependent chain (docs/design.md, "A fused Hopper forward").

    python -m benchmarks.fwd_model [--shape B2-T8192-H32[-HV64][-K256] ...] [--seqlens 1300,547,...]
                                   [--card H100|H200] [--tbps X] [--tflops Y] [--sms N]

Designs:
- "split", the compiled forward of today (cuda_fast/csrc/kda_fwd.cu): an intra kernel reads q, k, v, the raw gate
  and beta and writes qg, kg, w, u, Aqk and each chunk's decay; the recurrence reads those back and writes o.
- "fused": the same math with qg, kg, w, u, Aqk and the decays kept on chip (shared memory or L2): DRAM sees only q,
  k, v, g, beta in and o out (and the states).

Per design: its bytes at the copy bandwidth; its FLOPs (`benchmarks.model`'s: Aqk, Akk, w, u and Aqk v_new over a
chunk's columns, w S, qg S and kg^T v_new; the same for both designs) at the bf16 matmul rate; and the chain: each
sequence's state, split into 64-row V slices (a wgmma's M), is one chain of dependent steps, one per BT-token chunk,
each two products on one SM (v_new of the slice: 64 x BT x K, then its state update: 64 x K x BT) at that SM's
share of the matmul rate. A design's floor is the largest of the three. Card presets are the copy bandwidth and bf16
matmul rate our reports measured (docs/benchmarks/H100.md, H200.md).
"""
from __future__ import annotations

import argparse
import math
from typing import NamedTuple

from benchmarks.model import DTYPE_BYTES, cost
from benchmarks.suites import Shape, parse_shape

BT = 64       # tokens per chunk
M_SLICE = 64  # V rows of one chain (a warpgroup's wgmma M)
# (copy TB/s, bf16 matmul TFLOP/s, SMs) as measured in the reports of 2026-11-27 (H100) and 2026-11-28 (H200)
CARDS = {"H100": (2.99, 690.0, 132), "H200": (4.24, 685.0, 132)}


class Floors(NamedTuple):
    """One design's floors for one shape, in microseconds, with the totals they come from."""
    bytes: int
    flops: float
    steps: int          # chunk steps of the longest chain
    chains: int
    byte_us: float
    flop_us: float
    chain_us: float

    @property
    def floor_us(self) -> float:
        return max(self.byte_us, self.flop_us, self.chain_us)


def seq_lengths(shape: Shape) -> list[int]:
    """The shape's sequence lengths: its varlen `seqlens`, else B sequences of T tokens."""
    return list(shape.seqlens) if shape.seqlens else [shape.T] * shape.B


def workspace_bytes(shape: Shape) -> int:
    """Bytes of the split design's intra outputs over the shape's tokens: qg, kg, w [.., HV, K], u [.., HV, V], Aqk
    [.., HV, BT] in the input dtype and each chunk's decay [NT, HV, K] fp32."""
    e = DTYPE_BYTES[shape.dtype]
    seqlens = seq_lengths(shape)
    chunks = sum(math.ceil(n / BT) for n in seqlens)
    return sum(seqlens) * shape.HV * (3 * shape.K + shape.V + BT) * e + chunks * shape.HV * shape.K * 4


def floors(shape: Shape, design: str, tbps: float, tflops: float, sms: int) -> Floors:
    """`Floors` of `design` ("split" or "fused") for `shape` (fixed length, or varlen with `shape.seqlens`) on a card
    with copy bandwidth `tbps` TB/s, bf16 matmul rate `tflops` TFLOP/s and `sms` SMs, with an initial and a final
    fp32 state per sequence. Bytes and FLOPs of the fused design are `benchmarks.model.cost`'s forward; the split one
    adds its workspaces, written once and read once."""
    if design not in ("split", "fused"):
        raise ValueError(f"floors: design must be 'split' or 'fused', got {design!r}")
    c = cost(shape, "fwd", chunk_size=BT, initial_state=True, final_state=True)
    nbytes = c.bytes + (2 * workspace_bytes(shape) if design == "split" else 0)
    seqlens = seq_lengths(shape)
    steps = max(math.ceil(n / BT) for n in seqlens)
    step_flops = 2 * (2 * M_SLICE * BT * shape.K)  # v_new of the slice, then its state update
    return Floors(bytes=nbytes, flops=c.flops, steps=steps,
                  chains=sum(1 for n in seqlens if n) * shape.HV * math.ceil(shape.V / M_SLICE),
                  byte_us=nbytes / (tbps * 1e12) * 1e6, flop_us=c.flops / (tflops * 1e12) * 1e6,
                  chain_us=steps * step_flops / (tflops * 1e12 / sms) * 1e6)


def shape_name(s: Shape) -> str:
    """A table row's shape: `B2 T8192 H32 HV32 K128 V128` or `varlen [lens] H.. HV.. K.. V..`."""
    return (f"varlen {list(s.seqlens)} " if s.seqlens else f"B{s.B} T{s.T} ") + f"H{s.H} HV{s.HV} K{s.K} V{s.V}"


def add_card_args(p: argparse.ArgumentParser) -> None:
    """--card and the rates that override its preset (`card_rates`)."""
    p.add_argument("--card", choices=sorted(CARDS), default="H100")
    p.add_argument("--tbps", type=float, default=None, help="copy bandwidth, TB/s (default: the card's)")
    p.add_argument("--tflops", type=float, default=None, help="bf16 matmul rate, TFLOP/s (default: the card's)")
    p.add_argument("--sms", type=int, default=None, help="SM count (default: the card's)")


def card_rates(args: argparse.Namespace) -> tuple[float, float, int]:
    """(copy TB/s, bf16 matmul TFLOP/s, SMs): the card's preset, each overridden where given."""
    tbps, tflops, sms = CARDS[args.card]
    return args.tbps or tbps, args.tflops or tflops, args.sms or sms


def table(shapes: list[Shape], tbps: float, tflops: float, sms: int) -> list[str]:
    """Markdown rows: per shape and design, bytes, FLOPs, each floor and the design's floor."""
    lines = ["| shape | design | MB | GFLOP | byte floor us | FLOP floor us | chain floor us (steps x chains) "
             "| floor us |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in shapes:
        name = shape_name(s)
        for design in ("split", "fused"):
            f = floors(s, design, tbps, tflops, sms)
            lines.append(f"| {name} | {design} | {f.bytes / 1e6:.0f} | {f.flops / 1e9:.1f} | {f.byte_us:.0f} | "
                         f"{f.flop_us:.0f} | {f.chain_us:.0f} ({f.steps} x {f.chains}) | **{f.floor_us:.0f}** |")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fwd_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=None,
                   help="B2-T8192-H32[-HV64][-K256][-V256] (repeatable; default: B2-T8192-H32 and B1-T8192-H96)")
    p.add_argument("--seqlens", default=None, help="comma-separated sequence lengths: one varlen row (B1, T their sum)"
                                                   " with the first --shape's heads")
    add_card_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tbps, tflops, sms = card_rates(args)
    shapes = [parse_shape(t) for t in (args.shape or ["B2-T8192-H32", "B1-T8192-H96"])]
    if args.seqlens:
        lens = tuple(int(n) for n in args.seqlens.split(","))
        s = shapes[0]
        shapes.append(Shape(B=1, T=sum(lens), H=s.H, HV=s.HV, K=s.K, V=s.V, seqlens=lens, dtype=s.dtype, tag="varlen"))
    print(f"{args.card}: copy {tbps} TB/s, bf16 matmul {tflops} TFLOP/s, {sms} SMs; chunk {BT}, chain slice {M_SLICE}")
    print("\n".join(table(shapes, tbps, tflops, sms)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

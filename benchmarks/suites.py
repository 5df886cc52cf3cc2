"""Named shape suites and flag sets for the benchmarks.

A :class:`Shape` names one problem size: ``B`` sequences of ``T`` tokens (or, in varlen mode, ``B == 1`` and
``seqlens`` summing to ``T``), ``H`` q/k heads, ``HV`` v heads, key dim ``K``, value dim ``V`` and the input dtype.
A flag set names how the inputs are built (``reference.harness.make_inputs`` arguments) and which ``chunk_kda``
options are switched on. Everything here is plain data: importing this module touches no GPU.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Shape:
    """One benchmark problem size.

    ``seqlens`` (varlen) requires ``B == 1`` and ``sum(seqlens) == T``; ``tag`` names the varlen pattern.
    """

    B: int
    T: int
    H: int
    HV: int
    K: int = 128
    V: int = 128
    seqlens: tuple[int, ...] | None = None
    dtype: str = "bf16"
    tag: str = ""

    def __post_init__(self):
        for name in ("B", "T", "H", "HV", "K", "V"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Shape.{name} must be a positive int, got {value!r}")
        if self.HV % self.H != 0:
            raise ValueError(f"Shape.HV must be a multiple of H, got HV={self.HV}, H={self.H}")
        if self.dtype not in DTYPES:
            raise ValueError(f"Shape.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.seqlens is not None:
            if self.B != 1:
                raise ValueError(f"Shape.B must be 1 with seqlens (varlen), got B={self.B}")
            if any(n < 0 for n in self.seqlens) or sum(self.seqlens) != self.T:
                raise ValueError(
                    f"Shape.seqlens must be non-negative and sum to T={self.T}, got sum {sum(self.seqlens)}"
                )

    @property
    def varlen(self) -> bool:
        return self.seqlens is not None

    @property
    def n_seqs(self) -> int:
        """Number of sequences N (= B, or len(seqlens) in varlen mode)."""
        return len(self.seqlens) if self.seqlens is not None else self.B

    @property
    def tokens(self) -> int:
        """Total tokens over the batch (B * T)."""
        return self.B * self.T

    @property
    def label(self) -> str:
        """Readable id, e.g. ``B2-T8192-H32-HV32-K128-V128`` or ``varlen-rand20-B1-T16384-H32-HV32-K128-V128``."""
        core = f"B{self.B}-T{self.T}-H{self.H}-HV{self.HV}-K{self.K}-V{self.V}"
        if self.varlen:
            return f"varlen-{self.tag or len(self.seqlens)}-{core}"
        return core


_SHAPE_TOKEN = re.compile(r"^(HV|B|T|H|K|V)(\d+)$")


def parse_shape(text: str) -> Shape:
    """Parse ``B2-T8192-H32[-HV64][-K128][-V128][-bf16|fp16|fp32]`` into a fixed-length :class:`Shape`.

    HV defaults to H, K and V to 128, the dtype to bf16.
    """
    fields: dict[str, int] = {}
    dtype = "bf16"
    for token in text.strip().split("-"):
        if token in DTYPES:
            dtype = token
            continue
        match = _SHAPE_TOKEN.match(token)
        if match is None or match.group(1) in fields:
            raise ValueError(
                f"shape {text!r}: cannot read {token!r}; expected e.g. 'B2-T8192-H32-HV32-K128-V128-bf16' "
                "(B, T and H required, each letter once)"
            )
        fields[match.group(1)] = int(match.group(2))
    missing = [name for name in ("B", "T", "H") if name not in fields]
    if missing:
        raise ValueError(f"shape {text!r}: missing {', '.join(missing)}; expected e.g. 'B2-T8192-H32'")
    fields.setdefault("HV", fields["H"])
    return Shape(dtype=dtype, **fields)


def random_seqlens(n: int, total: int, seed: int = 0) -> tuple[int, ...]:
    """``n`` positive lengths summing to ``total``, drawn from a seeded generator (same result on every run)."""
    if not 1 <= n <= total:
        raise ValueError(f"random_seqlens: n must be in [1, total={total}], got {n}")
    cuts = sorted(random.Random(seed).sample(range(1, total), n - 1))
    bounds = [0, *cuts, total]
    return tuple(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def uniform_seqlens(n: int, total: int) -> tuple[int, ...]:
    """``n`` sequences of ``total // n`` tokens; the remainder goes to the last one."""
    base = total // n
    return (base,) * (n - 1) + (total - base * (n - 1),)


def skewed_seqlens(total: int, long: int, short: int) -> tuple[int, ...]:
    """One sequence of ``long`` tokens followed by sequences of ``short`` tokens filling up ``total``."""
    rest = total - long
    if rest < 0 or rest % short != 0:
        raise ValueError(f"skewed_seqlens: total - long = {rest} must be a non-negative multiple of short={short}")
    return (long,) + (short,) * (rest // short)


TLE_SEQLENS = (1300, 547, 2048, 963, 271, 3063)  # the varlen batch of TLE's published forward timings


def _varlen(seqlens: tuple[int, ...], tag: str, H: int = 32) -> Shape:
    return Shape(B=1, T=sum(seqlens), H=H, HV=H, seqlens=seqlens, tag=tag)


SUITES: dict[str, tuple[Shape, ...]] = {
    "standard": (
        Shape(B=1, T=8192, H=16, HV=16),
        Shape(B=2, T=8192, H=32, HV=32),
        Shape(B=2, T=8192, H=64, HV=64),
        Shape(B=8, T=2048, H=32, HV=32),
    ),
    "kimi": tuple(Shape(B=1, T=t, H=32, HV=32) for t in (4096, 8192, 16384, 32768)),
    "long": tuple(Shape(B=1, T=t, H=8, HV=8) for t in (32768, 65536, 131072)),
    "gva": (
        Shape(B=2, T=8192, H=16, HV=32),
        Shape(B=2, T=8192, H=8, HV=64),
    ),
    "varlen": (
        _varlen(random_seqlens(20, 16384, seed=0), "rand20"),
        _varlen(uniform_seqlens(10, 16384), "uniform10"),
        _varlen(skewed_seqlens(16384, long=8192, short=128), "skewed"),
    ),
    "headdim": (
        Shape(B=2, T=8192, H=16, HV=16, K=64, V=64),
        Shape(B=2, T=8192, H=16, HV=16, K=256, V=256),
    ),
    # the published prefill anchors (TLE, fla PR 1075: T8192 H96 and its varlen batch) and that batch with GVA
    "prefill": (
        Shape(B=1, T=8192, H=96, HV=96),
        _varlen(TLE_SEQLENS, "tle6", H=96),
        Shape(B=1, T=sum(TLE_SEQLENS), H=16, HV=32, seqlens=TLE_SEQLENS, tag="tle6"),
    ),
    "fp32": (Shape(B=1, T=8192, H=16, HV=16, dtype="fp32"),),
    # one decode step (T = 1) of fused_recurrent_kda on a state pool of DECODE_SLOTS slots (benchmarks/decode.py)
    "decode": tuple(Shape(B=b, T=1, H=32, HV=32) for b in (1, 64, 256)),
}
DECODE_SUITES = ("decode",)
DECODE_SLOTS = 1024


@dataclass(frozen=True)
class FlagSet:
    """How inputs are built (``make_kwargs`` for ``reference.harness.make_inputs``, which also puts those flags into
    the kwargs dict) and the ``chunk_kda`` options it does not take (``call_kwargs``)."""

    name: str
    make_kwargs: dict
    call_kwargs: dict
    description: str


FLAG_SETS: dict[str, FlagSet] = {
    "kimi": FlagSet(
        name="kimi",
        make_kwargs={"gate": "raw", "use_gate_in_kernel": True, "lower_bound": -5.0,
                     "use_beta_sigmoid_in_kernel": True, "use_qk_l2norm_in_kernel": True},
        call_kwargs={"safe_gate": True},
        description="l2norm + gate in kernel (A_log, dt_bias) + safe_gate, lower_bound=-5 + beta sigmoid in kernel",
    ),
    "pregated": FlagSet(
        name="pregated",
        make_kwargs={"gate": "logsigmoid", "use_qk_l2norm_in_kernel": True},
        call_kwargs={},
        description="precomputed log-decay g = logsigmoid(x), post-sigmoid beta, l2norm in kernel",
    ),
}


def resolve_suites(names: list[str]) -> dict[str, tuple[Shape, ...]]:
    """Map suite names (``all`` expands to every suite) to their shapes, in the order given, without repeats."""
    out: dict[str, tuple[Shape, ...]] = {}
    for name in names:
        if name == "all":
            out.update((key, value) for key, value in SUITES.items() if key not in out)
        elif name in SUITES:
            out.setdefault(name, SUITES[name])
        else:
            raise ValueError(f"unknown suite {name!r}; expected one of {', '.join([*SUITES, 'all'])}")
    return out


def resolve_flags(names: list[str]) -> list[FlagSet]:
    """Flag sets by name, in the order given."""
    unknown = [name for name in names if name not in FLAG_SETS]
    if unknown:
        raise ValueError(f"unknown flag set(s) {unknown}; expected some of {', '.join(FLAG_SETS)}")
    return [FLAG_SETS[name] for name in dict.fromkeys(names)]


def select_shapes(shapes: tuple[Shape, ...], *, quick: bool = False, max_shapes: int | None = None,
                  labels: tuple[str, ...] = ()) -> list[Shape]:
    """The shapes to run from one suite.

    ``labels``, when given, keeps only the shapes whose label contains one of them (``B2-T8192-H64``); ``quick``
    keeps at most two shapes that share the first shape's (H, HV, K, V) and varlen-ness, so fla autotunes once for
    the suite; ``max_shapes`` caps the count after that.
    """
    chosen = [s for s in shapes if not labels or any(part in s.label for part in labels)]
    if quick and chosen:
        first = chosen[0]
        same = [s for s in chosen if (s.H, s.HV, s.K, s.V, s.varlen) == (first.H, first.HV, first.K, first.V,
                                                                         first.varlen)]
        chosen = same[:2]
    if max_shapes is not None:
        if max_shapes < 1:
            raise ValueError(f"max_shapes must be >= 1, got {max_shapes}")
        chosen = chosen[:max_shapes]
    return chosen

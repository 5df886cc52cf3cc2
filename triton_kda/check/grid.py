"""The configurations `kda-check` runs: one frozen `CheckConfig` per (shapes, flags, dtype), and the two grids.

`quick_grid()` is sized for the Triton interpreter on a CPU-only machine (tiny shapes, fp32 and fp16: the
interpreter's bf16 arithmetic is wrong); `full_grid(dtypes)` is sized for a GPU. Each config's `id` is its key in
tables and baselines, so it only changes when the configuration does.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from reference.harness import GATE_MODES, GATE_REGIMES, LAYOUTS, case_id

__all__ = ["CheckConfig", "DTYPES", "full_grid", "quick_grid", "regime_grid"]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class CheckConfig:
    """One `chunk_kda` call to check against the fp64 oracle.

    B, T, H, HV, K, V: sizes as in `chunk_kda` (q/k `[B, T, H, K]`, v `[B, T, HV, V]`). seqlens: lengths of the
    sequences packed into one row (varlen: then B == 1 and T == sum(seqlens)); None for fixed length. gate: how the
    random gate input is drawn (`reference.harness.make_inputs`; None: its default, "raw" with use_gate_in_kernel,
    else "logsigmoid"). dtype: "fp32", "fp16" or "bf16" for q, k, v, g.
    The remaining fields are `chunk_kda` arguments of the same name (`chunk_size` is BT).
    """

    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    dtype: str = "fp32"
    seqlens: tuple[int, ...] | None = None
    gate: str | None = None
    use_qk_l2norm_in_kernel: bool = False
    use_gate_in_kernel: bool = False
    lower_bound: float | None = None
    safe_gate: bool = False
    use_beta_sigmoid_in_kernel: bool = False
    allow_neg_eigval: bool = False
    initial_state: bool = False
    output_final_state: bool = False
    state_v_first: bool = False
    chunk_size: int = 64

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"CheckConfig: `dtype` must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.gate is not None and self.gate not in GATE_MODES:
            raise ValueError(f"CheckConfig: `gate` must be None or one of {GATE_MODES}, got {self.gate!r}")
        if self.seqlens is not None and (self.B != 1 or sum(self.seqlens) != self.T):
            raise ValueError(
                f"CheckConfig: varlen needs B == 1 and T == sum(seqlens), got B={self.B}, T={self.T}, "
                f"seqlens={self.seqlens}"
            )

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def id(self) -> str:
        """Readable key (`reference.harness.case_id`), e.g. `B1-T57-H1-HV2-K16-V16-fp32-seqlens=17,0,40-h0-ht`."""
        return case_id(
            B=self.B, T=self.T, H=self.H, HV=self.HV, K=self.K, V=self.V, dtype=self.torch_dtype,
            seqlens=self.seqlens, gate=self.gate, use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
            use_gate_in_kernel=self.use_gate_in_kernel, lower_bound=self.lower_bound, safe_gate=self.safe_gate,
            use_beta_sigmoid_in_kernel=self.use_beta_sigmoid_in_kernel, allow_neg_eigval=self.allow_neg_eigval,
            initial_state=self.initial_state, output_final_state=self.output_final_state,
            state_v_first=self.state_v_first, chunk_size=self.chunk_size if self.chunk_size != 64 else None,
        )


def quick_grid() -> list[CheckConfig]:
    """A dozen tiny configurations (T <= 80, K, V in {16, 32}) covering every shape class, gate mode and flag once;
    fp32 plus two fp16 configs, and two decode configs (sequences of a few tokens). Sized to run forward and
    backward through the Triton interpreter in minutes on 2 cores."""
    ht = dict(initial_state=True, output_final_state=True)
    return [
        CheckConfig(1, 64, 1, 1, 16, 16),
        CheckConfig(2, 80, 2, 2, 32, 16, **ht),
        CheckConfig(1, 20, 1, 1, 16, 32, gate="strong"),
        CheckConfig(1, 48, 1, 2, 16, 16, output_final_state=True),
        CheckConfig(1, 57, 1, 2, 16, 16, seqlens=(17, 0, 40), **ht),
        CheckConfig(1, 40, 1, 1, 16, 16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True),
        CheckConfig(1, 40, 1, 1, 16, 16, use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True),
        CheckConfig(1, 40, 1, 1, 16, 16, gate="safe", safe_gate=True, output_final_state=True),
        CheckConfig(1, 40, 1, 1, 16, 16, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
        CheckConfig(1, 40, 1, 1, 16, 16, state_v_first=True, **ht),
        CheckConfig(1, 70, 1, 1, 16, 16, chunk_size=32, output_final_state=True),
        CheckConfig(1, 64, 1, 1, 16, 16, dtype="fp16", **ht),
        CheckConfig(1, 45, 1, 2, 16, 16, dtype="fp16", seqlens=(30, 15), use_qk_l2norm_in_kernel=True,
                    use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True, output_final_state=True),
        # decode rows (fused_recurrent_kda too): one token per sequence, and a varlen multi-token step
        CheckConfig(3, 1, 1, 2, 16, 16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                    use_beta_sigmoid_in_kernel=True, **ht),
        CheckConfig(1, 6, 1, 2, 16, 32, seqlens=(1, 3, 0, 2), state_v_first=True, **ht),
    ]


def regime_grid() -> list[CheckConfig]:
    """The gate-regime sweep (`reference.harness.GATE_REGIMES` on `LAYOUTS`, K = V = 128, l2norm, gate in kernel,
    initial and final state): the inputs `regime_inputs(regime, layout, dtype, seed=0)` gives the tests."""
    out = []
    for gate in GATE_REGIMES.values():
        for shape in LAYOUTS.values():
            seqlens = tuple(shape["seqlens"]) if "seqlens" in shape else None
            lb = gate.get("lower_bound")
            out.append(CheckConfig(shape["B"], shape["T"], shape["H"], shape["HV"], 128, 128, seqlens=seqlens,
                                   gate=gate["gate"], use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                   lower_bound=lb, safe_gate=lb is not None, initial_state=True,
                                   output_final_state=True))
    return out


def full_grid(dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")) -> list[CheckConfig]:
    """GPU-sized grid: K = V = 64/128, T around and well past the chunk, GVA, ragged varlen with an empty
    sequence, every flag, both chunk sizes, three decode configs, and the gate-regime sweep (`regime_grid`), each in
    every dtype of `dtypes`."""
    lb = dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True)
    ht = dict(initial_state=True, output_final_state=True)
    seqlens = (1, 300, 0, 64, 700)
    base = [
        CheckConfig(2, 64, 4, 4, 128, 128),
        CheckConfig(2, 63, 4, 4, 128, 128, **ht),
        CheckConfig(2, 500, 4, 4, 64, 64, **ht),
        CheckConfig(1, 2048, 2, 2, 128, 128, **ht),
        CheckConfig(2, 1000, 2, 4, 128, 64, output_final_state=True),
        CheckConfig(2, 1000, 2, 8, 64, 128, **ht),
        CheckConfig(1, sum(seqlens), 2, 4, 128, 128, seqlens=seqlens, **ht),
        CheckConfig(2, 777, 4, 4, 128, 128, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, **ht),
        CheckConfig(2, 777, 4, 4, 128, 128, use_qk_l2norm_in_kernel=True, **lb, **ht),
        CheckConfig(2, 777, 4, 4, 128, 128, gate="safe", safe_gate=True, **ht),
        CheckConfig(2, 512, 4, 4, 128, 128, use_beta_sigmoid_in_kernel=True, **ht),
        CheckConfig(2, 512, 4, 4, 128, 128, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, **ht),
        CheckConfig(2, 512, 4, 4, 128, 128, state_v_first=True, **ht),
        CheckConfig(2, 1000, 4, 4, 128, 128, chunk_size=32, **ht),
        CheckConfig(1, sum(seqlens), 2, 8, 128, 128, seqlens=seqlens, use_qk_l2norm_in_kernel=True,
                    use_beta_sigmoid_in_kernel=True, chunk_size=32, **lb, **ht),
        CheckConfig(2, 1000, 4, 4, 256, 128, gate="strong", **ht),
        # decode rows (fused_recurrent_kda too): Kimi Linear's decode step, a GVA multi-token step, varlen
        CheckConfig(64, 1, 32, 32, 128, 128, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                    use_beta_sigmoid_in_kernel=True, **ht),
        CheckConfig(4, 8, 2, 4, 128, 128, **ht),
        CheckConfig(1, 13, 2, 4, 128, 128, seqlens=(1, 4, 0, 8), use_gate_in_kernel=True, state_v_first=True, **ht),
    ]
    return [replace(c, dtype=d) for d in dtypes for c in base + regime_grid()]

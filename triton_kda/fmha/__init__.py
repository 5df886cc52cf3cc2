"""FMHA: parameterised softmax attention for DeepSeek-V4-style models (Triton; fp64 oracle in reference/fmha.py).

`fmha_fwd` (dense causal / sliding window / top-k gather, MQA head packing, sinks, varlen, split-KV; a window whose
keys fit one block runs its own kernel),
`fmha_swa_compressed` (the fused window + compressed-KV call) and `fmha_merge` (exact lse merge with a sink).
Importing this package compiles nothing and touches no GPU.
"""
from triton_kda.fmha.api import FmhaOutput, fmha_fwd, fmha_merge, fmha_swa_compressed
from triton_kda.fmha.configs import FmhaConfig, WindowConfig

__all__ = ["FmhaConfig", "WindowConfig", "FmhaOutput", "fmha_fwd", "fmha_merge", "fmha_swa_compressed"]

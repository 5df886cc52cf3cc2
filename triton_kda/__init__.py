"""triton-kda: portable Triton kernels for KDA (Kimi Delta Attention).

Importing this package touches no GPU and compiles nothing; kernels compile on first call. ``backend_report()``
tells which backend (a compiled `cuda_fast` one, or Triton) served the last calls and why.
"""
from cuda_fast import backend_report
from triton_kda.chunk import chunk_kda
from triton_kda.cp import build_cp_context

__all__ = ["backend_report", "build_cp_context", "chunk_kda"]
__version__ = "0.1.0"

"""triton-kda: portable Triton kernels for KDA (Kimi Delta Attention).

Importing this package touches no GPU and compiles nothing; kernels compile on first call.
"""
from triton_kda.chunk import chunk_kda

__all__ = ["chunk_kda"]
__version__ = "0.1.0"

"""triton-kda: portable Triton kernels for KDA (Kimi Delta Attention).

Importing this package touches no GPU and compiles nothing; kernels compile on first call. ``backend_report()``
tells which backend (a compiled `cuda_fast` one, or Triton) served the last calls and why. ``chunk_kda`` is a
``torch.library`` custom op underneath (`triton_kda.ops`): torch.compile traces it without graph breaks.
With ``TRITON_KDA_FLA_PLUGIN=1`` importing this package also registers triton_kda as a backend of
`fla.ops.kda.chunk_kda` once fla's KDA module is imported (`triton_kda.integrations.fla`).
"""
from triton_kda.backends import backend_report
from triton_kda.chunk import chunk_kda
from triton_kda.cp_plan import build_cp_context
from triton_kda.decode import fused_recurrent_kda
from triton_kda.integrations import enable_from_env

enable_from_env()

__all__ = ["backend_report", "build_cp_context", "chunk_kda", "fused_recurrent_kda"]
__version__ = "0.1.0"

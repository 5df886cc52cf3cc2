"""Compiled CUDA backends for triton-kda; `triton_kda.backends` registers ``BACKENDS`` the first time it chooses one.

``BACKENDS``: ``sm90`` (cuda_fast/sm90.py), the CUDA forward for inference on sm_90a and sm_100a, and ``sm90_bwd``
(cuda_fast/sm90_bwd.py), the chunk-local backward of a bf16 training step there. Importing this package compiles,
loads and probes nothing: the library is built the first time a backend is chosen.
"""

from cuda_fast import sm90, sm90_bwd

BACKENDS = (sm90.BACKEND, sm90_bwd.BACKEND)

__all__ = ["BACKENDS"]

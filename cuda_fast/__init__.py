"""Compiled CUDA backends for triton-kda; `triton_kda.backends` registers ``BACKENDS`` the first time it chooses one.

``BACKENDS``: ``sm90`` (cuda_fast/sm90.py), the CUDA forward for inference on sm_90a and sm_100a. Importing this
package compiles, loads and probes nothing: a backend's library is built the first time it is chosen.
``ENV_VAR`` and ``BackendDeclined`` are `triton_kda.backends`' own, re-exported for callers that force a backend.
"""

from cuda_fast import sm90
from triton_kda.backends import ENV_VAR, BackendDeclined

BACKENDS = (sm90.BACKEND,)

__all__ = ["BACKENDS", "ENV_VAR", "BackendDeclined"]

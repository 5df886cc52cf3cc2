"""Compiled CUDA backends for triton-kda; `triton_kda.backends` registers ``BACKENDS`` the first time it chooses one.

``BACKENDS``: ``sm90`` (cuda_fast/sm90.py), the CUDA forward for inference on sm_90a and sm_100a. Importing this
package compiles, loads and probes nothing: a backend's library is built the first time it is chosen.
"""

from cuda_fast import sm90

BACKENDS = (sm90.BACKEND,)

__all__ = ["BACKENDS"]

"""Compiled CUDA backends for triton-kda; `triton_kda.backends` registers ``BACKENDS`` the first time it chooses one.

``BACKENDS``: ``sm90_v2`` (cuda_fast/sm90_v2.py, opt-in: the forward with a 64-token recurrence on wgmma),
``sm90`` (cuda_fast/sm90.py), the CUDA forward for inference on sm_90a and sm_100a, ``sm90_split``
(cuda_fast/sm90_split.py: few heads over long sequences on sm_90a, the compiled 64-token intra stage and recurrence
around Triton's split state passing) and ``sm90_bwd`` (cuda_fast/sm90_bwd.py), the chunk-local backward of a bf16
training step there. Importing this package compiles, loads and probes nothing, and imports nothing but itself (a
wheel's build imports ``cuda_fast.build`` without torch): ``BACKENDS`` imports the backends when first read, and a
library is loaded (or built) the first time a backend is chosen.
"""

__all__ = ["BACKENDS"]


def __getattr__(name: str):
    if name == "BACKENDS":
        from cuda_fast import sm90, sm90_bwd, sm90_split, sm90_v2

        return (sm90_v2.BACKEND, sm90.BACKEND, sm90_split.BACKEND, sm90_bwd.BACKEND)
    raise AttributeError(f"module 'cuda_fast' has no attribute {name!r}")

"""Compiled CUDA backends for triton-kda, chosen per call by a registry; the Triton path is the fallback.

Registered: ``sm90`` (cuda_fast/sm90.py), the CUDA forward for inference on sm_90a and sm_100a. Importing this
package compiles, loads and probes nothing: a backend's library is built the first time it is chosen.
"""

from cuda_fast import sm90  # noqa: F401  (registers the backend; builds nothing)
from cuda_fast.registry import (
    ENV_VAR,
    Backend,
    BackendDeclined,
    Registry,
    ReportEntry,
    Selection,
    backend_report,
    clear_backend_report,
    register,
    registered,
    select,
)

__all__ = [
    "ENV_VAR",
    "Backend",
    "BackendDeclined",
    "Registry",
    "ReportEntry",
    "Selection",
    "backend_report",
    "clear_backend_report",
    "register",
    "registered",
    "select",
]

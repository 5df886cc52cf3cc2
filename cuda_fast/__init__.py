"""Compiled CUDA backends for triton-kda, chosen per call by a registry; the Triton path is the fallback.

No compiled backend is registered yet: every call goes to the Triton path. Importing this package compiles,
loads and probes nothing.
"""

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

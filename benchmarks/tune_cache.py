"""Keep Triton autotuning results (fla's `*.autotune.json`) between device calls.

fla autotunes every kernel for minutes on each new shape and, with its default `FLA_CACHE_RESULTS=1`, stores the
chosen configurations in the Triton cache. The device machine starts bare on every call, so `--tune-cache DIR`
copies those files from DIR into the Triton cache before anything compiles and back into DIR at the end. Only the
tuning results travel (a few KB), not the compiled kernels: each kernel still compiles once per process, so the
timed medians are unchanged, but a first call no longer includes the tuning time (the rows say so).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

PATTERN = "*.autotune.json"


def triton_cache_dir() -> Path:
    """The Triton cache folder this process uses (TRITON_CACHE_DIR, else Triton's default)."""
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def _copy_tree(src: Path, dst: Path) -> int:
    n = 0
    for path in sorted(src.rglob(PATTERN)):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        n += 1
    return n


def restore(saved: Path) -> int:
    """Copy the tuning results under `saved` into the Triton cache; returns how many."""
    return _copy_tree(saved, triton_cache_dir()) if saved.is_dir() else 0


def save(saved: Path) -> int:
    """Copy every tuning result of the Triton cache into `saved`; returns how many."""
    cache = triton_cache_dir()
    return _copy_tree(cache, saved) if cache.is_dir() else 0

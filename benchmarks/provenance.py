"""Provenance of a run: package versions, git commit and the GPU the numbers were taken on."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def package_version(dist: str, module: str) -> str:
    """Installed version of a distribution, else the module's ``__version__``, else "absent"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return getattr(__import__(module), "__version__", "unknown")
    except Exception:
        return "absent"


def git_sha() -> str:
    """$KDA_GIT_SHA when set (a copy of the tree, such as the device's, may carry a stale .git), else HEAD of the
    repository holding this file, else "unknown"."""
    if os.environ.get("KDA_GIT_SHA"):
        return os.environ["KDA_GIT_SHA"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else "unknown"


def provenance(device: torch.device) -> dict:
    """Where and with what the numbers were taken."""
    import triton

    info = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "fla": package_version("fla-core", "fla"), "python": platform.python_version(), "git_sha": git_sha(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, cc=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                    gpu_mem_gib=round(props.total_memory / 2**30, 1),
                    l2_mb=round(getattr(props, "L2_cache_size", 0) / 1e6, 1) or None)
    else:
        info.update(gpu=f"cpu ({platform.machine()})", cc=None, sm_count=None, gpu_mem_gib=None, l2_mb=None)
    return info

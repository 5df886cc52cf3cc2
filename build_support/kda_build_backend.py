"""The PEP 517 build backend: setuptools', plus nvcc from PyPI in a wheel's build environment where this machine has
none and the wheel carries CUDA targets (setup.py builds them), so that building a wheel needs no system CUDA.
Editable installs and sdists need nothing more."""
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook but the one below, unchanged)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cuda_fast import build  # noqa: E402  (imports no torch)

# nvcc, and the CUDA C++ headers it needs (libcu++), of the CUDA major release the kernels are built with
PIP_NVCC = ("nvidia-cuda-nvcc>=13,<14", "nvidia-cuda-cccl>=13,<14")


def get_requires_for_build_wheel(config_settings=None):
    extra = list(PIP_NVCC) if build.wheel_targets() and build.system_nvcc() is None else []
    return _setuptools.get_requires_for_build_wheel(config_settings) + extra

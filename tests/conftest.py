"""Test configuration: run Triton through its CPU interpreter when no CUDA GPU is present.

TRITON_INTERPRET must be set before triton is first imported, so this happens at conftest import time.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the interpreter and the fp64 oracle run many small ops: one thread is ~10x faster than two on 2 cores
    torch.set_num_threads(1)

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    # slow tests first: with `pytest -n 2` one worker runs them while the other works through the rest
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; this machine runs Triton through the CPU interpreter")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)

"""triton_kda.launch on the CPU, with a stand-in kernel and driver: which launches go through Triton, which call the
kept launcher, and the argument list the launcher gets."""
from __future__ import annotations

import pytest
import torch
from triton.compiler import CompiledKernel

from triton_kda import launch


class _Compiled(CompiledKernel):
    """A compiled kernel whose launcher records its calls."""

    def __init__(self, calls: list):
        self.calls = calls

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.calls.append(("direct", grid, args, stream))
        return runner


class _Kernel:
    """A JIT kernel with parameters (x, n, A, B): launching records the call and returns the compiled kernel."""

    arg_names = ["x", "n", "A", "B"]

    def __init__(self):
        self.calls: list = []
        self.compiled = _Compiled(self.calls)

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append(("triton", grid, args, kwargs))
            return self.compiled
        return run


class _Driver:
    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 1234


@pytest.fixture
def compiled_mode(monkeypatch):
    monkeypatch.setattr(launch, "is_interpreter", lambda: False)
    monkeypatch.setattr(launch, "_driver", _Driver)
    launch.clear_kept()
    yield
    launch.clear_kept()


def test_second_launch_calls_the_kept_launcher_with_every_parameter_in_order(compiled_mode):
    kernel, x = _Kernel(), torch.zeros(8)
    launch.launch_kernel(kernel, (3, 2), x, 5, B=True, A=7, num_warps=4)
    launch.launch_kernel(kernel, (3, 2), x, 5, B=True, A=7, num_warps=4)
    assert [c[0] for c in kernel.calls] == ["triton", "direct"]
    assert kernel.calls[1][1:] == ((3, 2, 1), (x, 5, 7, True), 1234)


@pytest.mark.parametrize("change", ["scalar", "constexpr", "grid", "dtype"])
def test_a_launch_unlike_the_kept_one_goes_through_triton(compiled_mode, change):
    kernel, x = _Kernel(), torch.zeros(8)
    launch.launch_kernel(kernel, (3,), x, 5, A=7, B=True, num_warps=4)
    args = dict(grid=(3,), x=x, n=5, A=7)
    args.update(dict(scalar={"n": 6}, constexpr={"A": 8}, grid={"grid": (4,)}, dtype={"x": x.double()})[change])
    launch.launch_kernel(kernel, args["grid"], args["x"], args["n"], A=args["A"], B=True, num_warps=4)
    assert [c[0] for c in kernel.calls] == ["triton", "triton"]


def test_unaligned_tensors_defaults_and_the_interpreter_go_through_triton(compiled_mode, monkeypatch):
    kernel = _Kernel()
    odd = torch.zeros(64, dtype=torch.uint8)[1:]  # data_ptr not a multiple of 16
    for _ in range(2):
        launch.launch_kernel(kernel, (1,), odd, 5, A=1, B=False)
    for _ in range(2):  # B left to its default: the launcher's argument list is not known
        launch.launch_kernel(kernel, (1,), torch.zeros(4), 5, A=1)
    monkeypatch.setattr(launch, "is_interpreter", lambda: True)
    for _ in range(2):
        launch.launch_kernel(kernel, (1,), torch.zeros(4), 5, A=2, B=False)
    assert [c[0] for c in kernel.calls] == ["triton"] * 6

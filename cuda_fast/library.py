"""The built cuda_fast shared library and its C entry points (loaded through ctypes; no torch headers).

Every entry point ``NAME(const Args*, void* stream, char* err, int errlen) -> int`` has a companion
``NAME_args_size()``; ``Library.entry`` checks it against the ctypes mirror of the argument block, so a library and
a Python side that disagree fail at load, not with wrong memory."""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import torch

from cuda_fast.targets import CAPABILITY_TARGETS
from triton_kda.backends import Backend


class Entry:
    """One C entry point; calling it raises RuntimeError with the library's message when it declines or fails."""

    def __init__(self, cdll: ctypes.CDLL, name: str, struct: type[ctypes.Structure], path):
        self.name = name
        self.fn = getattr(cdll, name)
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.POINTER(struct), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        size_fn = getattr(cdll, f"{name}_args_size")
        size_fn.restype = ctypes.c_int
        size = size_fn()
        if size != ctypes.sizeof(struct):
            raise RuntimeError(f"{path}: {struct.__name__} is {size} bytes in the library, {ctypes.sizeof(struct)} "
                               f"in Python")

    def __call__(self, args: ctypes.Structure, stream: int) -> None:
        err = ctypes.create_string_buffer(512)
        if self.fn(ctypes.byref(args), ctypes.c_void_p(stream), err, len(err)) != 0:
            raise RuntimeError(err.value.decode(errors="replace"))


class Library:
    """A shared library of the CUDA sources; origin: where it came from ("packaged ...", "built ...")."""

    def __init__(self, path, origin: str = "built"):
        self.path = path
        self.origin = origin
        self.cdll = ctypes.CDLL(str(path))
        self._entries: dict[str, Entry] = {}

    def entry(self, name: str, struct: type[ctypes.Structure]) -> Entry:
        if name not in self._entries:
            self._entries[name] = Entry(self.cdll, name, struct, self.path)
        return self._entries[name]


@functools.cache
def load_library(target: str) -> Library:
    """The library for a target ("90a" or "100a"): the wheel's packaged one where its manifest matches the sources,
    else the build cache's, built on first use; BuildError with both reasons where neither is to be had."""
    from cuda_fast import build  # imported on first use: `python -m cuda_fast.build` runs it as __main__

    path, why_not = build.packaged(target)
    if path is not None:
        return Library(path, f"packaged ({path})")
    try:
        path = build.library(target)
    except build.BuildError as error:
        raise build.BuildError(f"{why_not}; {error}") from error
    return Library(path, f"built ({path}; {why_not})")


def data_ptr(t: torch.Tensor | None) -> int | None:
    """A tensor's address for an argument block (None stays a null pointer)."""
    return None if t is None else t.data_ptr()


def entry_for(device: torch.device | None, name: str, struct: type[ctypes.Structure]) -> Entry:
    """Entry point ``name`` of the library for ``device``'s compute capability (None: the current device), built on
    first use; RuntimeError where cuda_fast has no target for it."""
    cc = torch.cuda.get_device_capability(device)
    if cc not in CAPABILITY_TARGETS:
        raise RuntimeError(f"cuda_fast has no build for compute capability {cc[0]}.{cc[1]}")
    return load_library(CAPABILITY_TARGETS[cc]).entry(name, struct)


def library_origin() -> str:
    """"library: <origin>" of the loaded library for the current device's compute capability."""
    return f"library: {load_library(CAPABILITY_TARGETS[torch.cuda.get_device_capability()]).origin}"


def compiled_backend(name: str, op: str, env_switch: str, verifier: Callable, fn: Callable, entry: str,
                     struct: type[ctypes.Structure]) -> Backend:
    """A registry backend serving ``op`` with ``fn`` on sm_90 / sm_100 (priority 10). Its loader finds the library for
    the current device (packaged, or built on first use, `load_library`) and binds ``entry`` the first time the
    backend is chosen: no library removes the backend, with both reasons; every selection's reason names the
    library's origin."""

    def load():
        entry_for(None, entry, struct)
        return fn

    return Backend(name=name, ops={op}, capabilities=frozenset(CAPABILITY_TARGETS), priority=10,
                   env_switch=env_switch, verifiers={op: verifier}, loader=load, describe=library_origin)

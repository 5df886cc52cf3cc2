"""Registry of compiled CUDA backends; the portable Triton path is the fallback for every call.

The compiled backends live in the `cuda_fast` package, which depends on triton_kda and lists them in its
``BACKENDS``; triton_kda never imports it at import time. The default registry imports ``cuda_fast`` once, the first
time it is asked to register, list or select a backend, and registers its ``BACKENDS`` (before any other backend);
a missing or broken ``cuda_fast`` only means no compiled backends (logged at INFO).

A backend declares the ops it implements, the compute capabilities it runs on, a priority, an optional environment
switch, one verifier per op (``verifier(args) -> (ok, reason)``, where ``args`` is the dict of the call's tensors and
options that the caller builds) and a loader. Nothing is compiled or imported at registration: the loader runs the
first time the backend is about to be chosen, and a loader that raises only removes that backend (its error
becomes the rejection reason).

``select(op, args, device)`` reads ``TRITON_KDA_BACKEND`` on every call:
  ``auto`` (default): the highest-priority backend (ties: registration order) whose capability matches the device,
      whose switch is on and whose verifier accepts the call; else Triton, with every rejection in the reason.
  ``triton``: always the Triton path.
  a backend name: that backend, or BackendDeclined (a ValueError) with the reason it cannot take the call.
The compute capability is read on first use per device (``torch.cuda.get_device_capability``), never at import; a
device that is not CUDA has none and goes to Triton without touching CUDA. Each distinct rejection is logged once at
INFO on the logger ``triton_kda.backend``; the last selections are kept for ``backend_report()``.

The module-level functions act on ``default_registry`` as it is at call time, so a test can swap in its own.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import torch

ENV_VAR = "TRITON_KDA_BACKEND"
AUTO = "auto"
TRITON = "triton"
REPORT_LENGTH = 32
PROVIDERS = ("cuda_fast",)

logger = logging.getLogger("triton_kda.backend")

Capability = tuple[int, int]
Verifier = Callable[[dict], tuple[bool, str]]


class BackendDeclined(ValueError):
    """``TRITON_KDA_BACKEND`` forces a registered backend that cannot take the call (the message says why)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Backend:
    """A compiled implementation of some ops, for some compute capabilities.

    name: how ``TRITON_KDA_BACKEND`` names it (not ``auto`` or ``triton``).
    ops: op names it implements, e.g. ``{"chunk_kda_fwd"}`` (stored as a frozenset).
    capabilities: the (major, minor) compute capabilities it runs on, or a predicate on (major, minor).
    priority: higher wins among the backends that take a call.
    env_switch: name of an environment variable that disables the backend when set to ``"0"``; None for none.
    verifiers: for every op in ``ops``, ``verifier(args) -> (ok, reason)`` deciding whether it takes that call.
    loader: ``loader() -> fn``, returning the callable implementation; runs lazily, at most once.
    describe: None, or ``describe() -> str``, called once after the loader succeeded and appended to each selection's
    reason (a compiled backend: which library serves).
    """

    name: str
    ops: frozenset[str]
    capabilities: frozenset[Capability] | Callable[[Capability], bool]
    priority: int = 0
    env_switch: str | None = None
    verifiers: Mapping[str, Verifier]
    loader: Callable[[], Callable[..., Any]]
    describe: Callable[[], str] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name in (AUTO, TRITON):
            raise ValueError(f"Backend `name` must be a non-empty string other than {AUTO!r} and {TRITON!r}, "
                             f"got {self.name!r}.")
        ops = frozenset([self.ops] if isinstance(self.ops, str) else self.ops)
        if not ops or not all(isinstance(op, str) for op in ops):
            raise ValueError(f"Backend {self.name!r}: `ops` must be a non-empty set of op names, got {self.ops!r}.")
        object.__setattr__(self, "ops", ops)
        if not callable(self.capabilities):
            capabilities = frozenset(tuple(cc) for cc in self.capabilities)
            if not capabilities or not all(len(cc) == 2 and all(isinstance(x, int) for x in cc)
                                           for cc in capabilities):
                raise ValueError(f"Backend {self.name!r}: `capabilities` must be a predicate or a non-empty set of "
                                 f"(major, minor) int pairs, got {self.capabilities!r}.")
            object.__setattr__(self, "capabilities", capabilities)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"Backend {self.name!r}: `priority` must be an int, got {self.priority!r}.")
        if self.env_switch is not None and (not isinstance(self.env_switch, str) or not self.env_switch):
            raise ValueError(f"Backend {self.name!r}: `env_switch` must be None or a variable name, "
                             f"got {self.env_switch!r}.")
        if set(self.verifiers) != ops or not all(callable(fn) for fn in self.verifiers.values()):
            raise ValueError(f"Backend {self.name!r}: `verifiers` must map every op in {sorted(ops)} (and no other) "
                             f"to a callable, got keys {sorted(self.verifiers)}.")
        object.__setattr__(self, "verifiers", MappingProxyType(dict(self.verifiers)))
        if not callable(self.loader):
            raise TypeError(f"Backend {self.name!r}: `loader` must be callable, got {type(self.loader).__name__}.")

    def supports(self, capability: Capability) -> bool:
        """Whether the backend runs on a device of this (major, minor) compute capability."""
        if callable(self.capabilities):
            return bool(self.capabilities(capability))
        return capability in self.capabilities


class Selection(NamedTuple):
    """The outcome of ``select``: ``fn`` is the backend's implementation, or None for the Triton path."""

    name: str
    fn: Callable[..., Any] | None
    reason: str


class ReportEntry(NamedTuple):
    """One past selection, as kept by ``backend_report``."""

    name: str
    op: str
    reason: str


def cuda_capability(device: torch.device) -> Capability | None:
    """(major, minor) compute capability of a CUDA device; None for another device type (without touching CUDA)
    or when CUDA is not available."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major, minor


class Registry:
    """Backends, their lazily loaded implementations and the selection report.

    capability_fn: ``fn(device) -> (major, minor) | None`` for any device type (None: no CUDA backend can run
        there); injectable for tests, which may give a CPU device a capability to route calls to fake backends.
    report_length: how many past selections ``backend_report`` keeps.
    providers: names of packages whose ``BACKENDS`` are registered, in order, on first use (none by default; the
        default registry has ``PROVIDERS``).
    """

    def __init__(self, capability_fn: Callable[[torch.device], Capability | None] = cuda_capability,
                 report_length: int = REPORT_LENGTH, providers: tuple[str, ...] = ()):
        self._capability_fn = capability_fn
        self._providers = tuple(providers)
        self._discovered = not self._providers
        self._backends: dict[str, Backend] = {}
        self._capabilities: dict[tuple[str, int], Capability | None] = {}
        self._loaded: dict[str, Callable[..., Any]] = {}
        self._load_errors: dict[str, str] = {}
        self._described: dict[str, str] = {}  # "; " + describe() of each loaded backend that has one
        self._logged: set[tuple[str, str, str]] = set()
        self._report: deque[ReportEntry] = deque(maxlen=report_length)

    def register(self, backend: Backend) -> None:
        """Add a backend; its loader does not run now. ValueError if the name is taken."""
        self._discover()
        if not isinstance(backend, Backend):
            raise TypeError(f"register() takes a Backend, got {type(backend).__name__}.")
        if backend.name in self._backends:
            raise ValueError(f"A backend named {backend.name!r} is already registered.")
        self._backends[backend.name] = backend

    def registered(self) -> tuple[Backend, ...]:
        """The registered backends, in registration order."""
        self._discover()
        return tuple(self._backends.values())

    def backend_report(self) -> list[ReportEntry]:
        """The last selections (oldest first), at most ``report_length`` of them."""
        return list(self._report)

    def clear_backend_report(self) -> None:
        self._report.clear()

    def select(self, op: str, args: dict, device: torch.device | str) -> Selection:
        """Choose the implementation of ``op`` for a call with ``args`` on ``device`` (see the module docstring).

        Raises ValueError when ``TRITON_KDA_BACKEND`` names an unknown backend, BackendDeclined (a ValueError) when
        it names one that cannot take the call.
        """
        self._discover()
        mode = os.environ.get(ENV_VAR, AUTO).strip() or AUTO
        device = torch.device(device)
        if mode == TRITON:
            selection = Selection(TRITON, None, f"forced by {ENV_VAR}={TRITON}")
        elif mode == AUTO:
            selection = self._auto(op, args, device)
        elif mode in self._backends:
            selection = self._forced(self._backends[mode], op, args, device)
        else:
            known = ", ".join([AUTO, TRITON, *self._backends])
            raise ValueError(f"{ENV_VAR}={mode!r} names no known backend; expected one of: {known}.")
        self._report.append(ReportEntry(selection.name, op, selection.reason))
        return selection

    def _discover(self) -> None:
        """Register the ``BACKENDS`` of every provider package, once (a provider that fails to import adds none)."""
        if self._discovered:
            return
        self._discovered = True
        for name in self._providers:
            try:
                provided = tuple(importlib.import_module(name).BACKENDS)
            except Exception as error:  # a missing or broken provider only means no compiled backends from it
                logger.info("no compiled backends from %s: %s: %s", name, type(error).__name__, error)
                continue
            for backend in provided:
                self.register(backend)

    def _auto(self, op: str, args: dict, device: torch.device) -> Selection:
        unavailable = self._device_problem(device)
        if unavailable is not None:
            return Selection(TRITON, None, unavailable)
        candidates = sorted((b for b in self._backends.values() if op in b.ops), key=lambda b: -b.priority)
        if not candidates:
            return Selection(TRITON, None, f"no CUDA backend registered for {op}")
        rejections = []
        for backend in candidates:
            fn, reason = self._try(backend, op, args, device)
            if fn is not None:
                skipped = f"; skipped {'; '.join(rejections)}" if rejections else ""
                return Selection(backend.name, fn, f"{backend.name} (priority {backend.priority}): {reason}{skipped}")
            rejections.append(f"{backend.name}: {reason}")
            self._log_once(backend.name, op, reason)
        return Selection(TRITON, None, f"no CUDA backend takes the call: {'; '.join(rejections)}")

    def _forced(self, backend: Backend, op: str, args: dict, device: torch.device) -> Selection:
        reason = self._device_problem(device)
        if reason is None and op not in backend.ops:
            reason = f"it implements {sorted(backend.ops)}, not {op}"
        if reason is None:
            fn, reason = self._try(backend, op, args, device)
            if fn is not None:
                return Selection(backend.name, fn, f"forced by {ENV_VAR}={backend.name}: {reason}")
        raise BackendDeclined(f"{ENV_VAR}={backend.name} forces backend {backend.name!r}, which cannot take this "
                              f"{op} call: {reason}")

    def _device_problem(self, device: torch.device) -> str | None:
        if self._capability(device) is not None:
            return None
        if device.type != "cuda":
            return f"inputs are on {device}, not a CUDA device"
        return "CUDA is not available"

    def _capability(self, device: torch.device) -> Capability | None:
        key = (device.type, device.index)
        if key in self._capabilities:
            return self._capabilities[key]
        capability = self._capability_fn(device)
        if device.index is not None:  # a bare "cuda" follows the current device, so it is not cached
            self._capabilities[key] = capability
        return capability

    def _try(self, backend: Backend, op: str, args: dict, device: torch.device) -> tuple[Callable | None, str]:
        """(fn, verifier's reason) when the backend takes the call, else (None, why not)."""
        if backend.env_switch is not None and os.environ.get(backend.env_switch) == "0":
            return None, f"disabled by {backend.env_switch}=0"
        major, minor = capability = self._capability(device)
        if not backend.supports(capability):
            return None, f"compute capability {major}.{minor} of {device} is not supported"
        ok, reason = backend.verifiers[op](args)
        if not ok:
            return None, f"verifier: {reason}"
        fn = self._load(backend)
        if fn is None:
            return None, self._load_errors[backend.name]
        return fn, reason + self._described.get(backend.name, "")

    def _load(self, backend: Backend) -> Callable[..., Any] | None:
        if backend.name not in self._loaded and backend.name not in self._load_errors:
            try:
                fn = backend.loader()
            except Exception as error:  # a missing or broken build only removes this backend
                self._load_errors[backend.name] = f"loader failed: {type(error).__name__}: {error}"
            else:
                if callable(fn):
                    self._loaded[backend.name] = fn
                    if backend.describe is not None:
                        self._described[backend.name] = f"; {backend.describe()}"
                else:
                    self._load_errors[backend.name] = f"loader returned {type(fn).__name__}, not a callable"
        return self._loaded.get(backend.name)

    def _log_once(self, name: str, op: str, reason: str) -> None:
        if (name, op, reason) not in self._logged:
            self._logged.add((name, op, reason))
            logger.info("backend %s rejected for %s: %s", name, op, reason)


default_registry = Registry(providers=PROVIDERS)


def register(backend: Backend) -> None:
    """``Registry.register`` on the default registry."""
    default_registry.register(backend)


def registered() -> tuple[Backend, ...]:
    """``Registry.registered`` of the default registry."""
    return default_registry.registered()


def select(op: str, args: dict, device: torch.device | str) -> Selection:
    """``Registry.select`` on the default registry."""
    return default_registry.select(op, args, device)


def backend_report() -> list[ReportEntry]:
    """Which backend served the last calls and why (oldest first): ``Registry.backend_report`` of the default one."""
    return default_registry.backend_report()


def clear_backend_report() -> None:
    """``Registry.clear_backend_report`` on the default registry."""
    default_registry.clear_backend_report()

"""triton_kda as a backend of fla's dispatch for `fla.ops.kda.chunk_kda` (fla-core 0.6.0, `fla.backends`).

`register()` adds a backend to the registry that fla's ``@dispatch`` built for `fla.ops.kda.chunk_kda` (the mechanism
of fla's FlashKDA backend), ahead of fla's own backends (priority 0; lower runs first). From then on every call of
`fla.ops.kda.chunk_kda` (and so fla's `KimiDeltaAttention` layer and the models built on it) that the verifier accepts
runs `triton_kda.chunk_kda` with the same arguments; a call it declines runs as before, and the reason is logged at
INFO on ``triton_kda.integrations.fla`` for every declined call. `unregister()` removes the backend again.

The verifier declines: ``TRITON_KDA_FLA_PLUGIN=0``; arguments that do not bind to chunk_kda's signature; keywords
other than ``A_log``, ``dt_bias``, ``chunk_size`` and ``transpose_state_layout`` (fla ignores unknown ones, chunk_kda
rejects them); ``cp_context`` (multi-GPU context parallel: triton_kda's, `triton_kda.cp`, takes fla's contexts when
called directly, but is not yet run on GPUs, and without its own context it has no initial or final states, which
fla's layer may pass) and ``use_graph`` / ``max_num_seqs``; inputs off CUDA (on
the CPU only under ``TRITON_INTERPRET=1``, and there not bf16, which the interpreter computes wrongly). Anything else
it accepts, invalid input included: triton_kda then raises fla's error (same order and text) or its own stricter one.

This module imports fla; ``import triton_kda`` does not import it (``TRITON_KDA_FLA_PLUGIN=1`` registers the backend
when fla's KDA module is imported: `triton_kda.integrations.enable_from_env`).
"""
from __future__ import annotations

import inspect
import logging
import os
from collections import Counter

import torch
from fla import backends as fla_backends
from fla.ops.kda.chunk import chunk_kda as fla_chunk_kda

import triton_kda
from triton_kda.integrations import ENV_FLA_PLUGIN, fla_plugin_mode

BACKEND_TYPE = "triton_kda"
PRIORITY = 0
_EXTRA_KWARGS = frozenset({"A_log", "dt_bias", "chunk_size", "transpose_state_layout"})
_SIGNATURE = inspect.signature(triton_kda.chunk_kda)

logger = logging.getLogger("triton_kda.integrations.fla")
_stats: Counter = Counter()


def decline_reason(*args, **kwargs) -> str | None:
    """Why the plug-in leaves this `fla.ops.kda.chunk_kda` call to fla, or None when triton_kda takes it."""
    if fla_plugin_mode() == "0":
        return f"disabled by {ENV_FLA_PLUGIN}=0"
    try:
        call = _SIGNATURE.bind(*args, **kwargs)
    except TypeError as error:
        return f"the arguments do not bind to chunk_kda's signature ({error})"
    given = call.arguments
    unknown = sorted(set(given.get("kwargs", {})) - _EXTRA_KWARGS)
    if unknown:
        return f"keyword(s) {unknown} are not chunk_kda's (fla ignores them)"
    if given.get("cp_context") is not None:
        return ("cp_context (multi-GPU context parallel) is not implemented through the plug-in: fla keeps its CP "
                "calls (triton_kda's CP is called as triton_kda.chunk_kda(cp_context=...))")
    if given.get("use_graph") or given.get("max_num_seqs") is not None:
        return "use_graph / max_num_seqs (fla's padded CUDA-graph chunk list) are not implemented in triton_kda"
    q = given["q"]
    if not isinstance(q, torch.Tensor):
        return f"q is a {type(q).__name__}, not a tensor"
    if q.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        if q.dtype == torch.bfloat16:
            return "bf16 on the CPU: the Triton interpreter computes bf16 wrongly"
    elif q.device.type != "cuda":
        return f"inputs are on {q.device}: triton_kda runs on CUDA devices (on the CPU only with TRITON_INTERPRET=1)"
    return None


class TritonKDABackend(fla_backends.BaseBackend):
    """fla backend for `fla.ops.kda.chunk_kda` that runs `triton_kda.chunk_kda`."""

    backend_type = BACKEND_TYPE
    priority = PRIORITY

    def chunk_kda_verifier(self, *args, **kwargs) -> tuple[bool, str | None]:
        reason = decline_reason(*args, **kwargs)
        if reason is not None:
            _stats["declined"] += 1
            logger.info("fla.ops.kda.chunk_kda: triton_kda declined the call: %s", reason)
            return False, reason
        _stats["accepted"] += 1
        return True, None

    def chunk_kda(self, *args, **kwargs):
        _stats["served"] += 1
        return triton_kda.chunk_kda(*args, **kwargs)


def _registry():
    """fla's registry for `fla.ops.kda.chunk_kda` (fla-core 0.6.0 keeps it by the undecorated function)."""
    registry = fla_backends._function_registries.get(inspect.unwrap(fla_chunk_kda))
    if registry is None:
        raise RuntimeError("fla.ops.kda.chunk_kda has no backend registry (fla's backend dispatch is disabled by "
                           "FLA_DISABLE_BACKEND_DISPATCH=1, or this fla is not fla-core 0.6.0)")
    return registry


def register() -> None:
    """Make `fla.ops.kda.chunk_kda` run triton_kda for every call the verifier accepts (idempotent)."""
    _registry()  # fla's register() would fail obscurely (or do nothing) without one
    fla_backends.register(fla_chunk_kda)(TritonKDABackend)


def unregister() -> None:
    """Give every `fla.ops.kda.chunk_kda` call back to fla (no-op when not registered)."""
    _registry()._backends.pop(BACKEND_TYPE, None)


def registered() -> bool:
    """Whether the plug-in is in fla's registry for `fla.ops.kda.chunk_kda`."""
    return BACKEND_TYPE in _registry()._backends


def stats() -> dict:
    """How many calls the verifier accepted and declined, and how many the plug-in served, since the last reset."""
    return {name: _stats[name] for name in ("accepted", "declined", "served")}


def reset_stats() -> None:
    _stats.clear()

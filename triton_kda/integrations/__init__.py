"""Integrations of triton_kda into other libraries' stacks: `triton_kda.integrations.fla` (fla's backend registry).

Nothing here imports those libraries: `enable_from_env` (run by ``import triton_kda``) only reads
``TRITON_KDA_FLA_PLUGIN`` and, when it is ``1``, arranges for `triton_kda.integrations.fla.register` to run as soon as
``fla.ops.kda`` is imported (at once if it already is).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys

ENV_FLA_PLUGIN = "TRITON_KDA_FLA_PLUGIN"
_FLA_MODULE = "fla.ops.kda"

logger = logging.getLogger("triton_kda.integrations")


def fla_plugin_mode() -> str:
    """``TRITON_KDA_FLA_PLUGIN``: ``""`` (unset: register only when asked), ``"1"`` (register when fla's KDA module
    is imported) or ``"0"`` (a registered plug-in declines every call). ValueError for any other value."""
    mode = os.environ.get(ENV_FLA_PLUGIN, "").strip()
    if mode not in ("", "0", "1"):
        raise ValueError(f"{ENV_FLA_PLUGIN} must be 0 or 1 (or unset), got {mode!r}")
    return mode


def _register_fla() -> None:
    try:
        from triton_kda.integrations import fla

        fla.register()
    except Exception as error:  # a failed plug-in must not break fla's own import
        logger.warning("%s=1: registering triton_kda with fla failed: %s: %s", ENV_FLA_PLUGIN,
                       type(error).__name__, error)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `callback` once, right after the module `name` has been executed by its own loader."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_callback(module):
            exec_module(module)
            callback()

        spec.loader.exec_module = exec_then_callback
        return spec


def enable_from_env() -> None:
    """With ``TRITON_KDA_FLA_PLUGIN=1``, register the fla plug-in now if ``fla.ops.kda`` is imported, else when it
    is; otherwise nothing. Imports neither fla nor torch."""
    if fla_plugin_mode() != "1":
        return
    if _FLA_MODULE in sys.modules:
        _register_fla()
    elif not any(isinstance(f, _AfterImport) and f.name == _FLA_MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_FLA_MODULE, _register_fla))

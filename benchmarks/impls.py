"""The implementations under test: each one's ``chunk_kda`` by name, imported on demand."""
from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks.cli import log

IMPLS = ("auto", "triton", "fla", "sm90")
DEFAULT_IMPLS = ("auto", "fla")


def forced_backend(chunk_kda: Callable, backend: str) -> Callable:
    """``chunk_kda`` with ``TRITON_KDA_BACKEND`` set to ``backend`` for each call ("triton": the Triton path even
    where a compiled backend would take the call; "sm90": the CUDA forward). A call the backend declines raises
    NotImplementedError, so its rows say "unsupported" with the verifier's reason."""
    from reference.harness import environ
    from triton_kda.backends import ENV_VAR, BackendDeclined

    def call(**kwargs):
        with environ({ENV_VAR: backend}):
            try:
                return chunk_kda(**kwargs)
            except BackendDeclined as exc:
                raise NotImplementedError(str(exc)) from exc

    return call


def load_impls(names: list[str]) -> dict[str, Callable | str]:
    """Implementation name -> its ``chunk_kda``, or a sentence saying why it cannot be imported. "auto" is
    triton_kda's ``chunk_kda`` as a user calls it (its default dispatch); "triton" and "sm90" force that backend for
    the forward."""
    impls: dict[str, Callable | str] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            if name in ("auto", "triton", "sm90"):
                from triton_kda import chunk_kda

                if name != "auto":
                    chunk_kda = forced_backend(chunk_kda, name)
            else:
                from fla.ops.kda import chunk_kda
        except Exception as exc:  # a missing package or an incompatible install: reported in the rows, not fatal
            impls[name] = f"{name} not importable: {type(exc).__name__}: {exc}"
            log(impls[name])
            continue
        impls[name] = chunk_kda
        log(f"imported {name} chunk_kda in {time.perf_counter() - t0:.1f} s")
    return impls

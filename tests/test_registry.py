"""Backend registry (triton_kda.backends): selection, fallbacks, forcing, lazy loading, provider discovery, logging
and the report, with fake backends.

Every test builds its own Registry with an injected compute capability, so nothing touches a GPU or the global
registry (except the module-level API tests: one only reads it, the other swaps in its own for the test, and the
discovery of `cuda_fast`, checked in a fresh interpreter).
"""

import logging
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from triton_kda import backends
from triton_kda.backends import ENV_VAR, Backend, Registry, ReportEntry, cuda_capability

OP = "chunk_kda_fwd"
CUDA0 = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def _auto_mode(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def impl(name):
    def fn(**kwargs):
        return name
    return fn


def fake(name, priority=0, ops=(OP,), capabilities=((9, 0),), env_switch=None, verdict=(True, "fits"),
         loader=None, loads=None):
    """A Backend whose verifiers all return `verdict`; `loads` (a list) records each loader call."""
    def default_loader():
        if loads is not None:
            loads.append(name)
        return impl(name)
    return Backend(name=name, ops=frozenset(ops), capabilities=capabilities, priority=priority,
                   env_switch=env_switch, verifiers={op: (lambda args: verdict) for op in ops},
                   loader=loader or default_loader)


def registry(*backends, capability=(9, 0), calls=None, providers=()):
    """A Registry whose CUDA devices have `capability` (None: CUDA unavailable) and other devices none, like the
    default; `calls` (a list) records each capability lookup; `providers`: package names it discovers."""
    def capability_fn(device):
        if calls is not None:
            calls.append(str(device))
        return capability if device.type == "cuda" else None
    reg = Registry(capability_fn=capability_fn, providers=providers)
    for backend in backends:
        reg.register(backend)
    return reg


def test_auto_picks_highest_priority_that_verifies():
    reg = registry(fake("low", priority=1), fake("mid", priority=5),
                   fake("high", priority=9, verdict=(False, "K=300 > 128")))
    sel = reg.select(OP, {"K": 300}, CUDA0)
    assert sel.name == "mid" and sel.fn() == "mid"
    assert sel.reason == "mid (priority 5): fits; skipped high: verifier: K=300 > 128"


def test_equal_priority_keeps_registration_order():
    assert registry(fake("first"), fake("second")).select(OP, {}, CUDA0).name == "first"


def test_verifier_rejection_falls_back_to_triton_with_reason():
    sel = registry(fake("sm90", verdict=(False, "V=512 unsupported"))).select(OP, {}, CUDA0)
    assert sel == ("triton", None, "no CUDA backend takes the call: sm90: verifier: V=512 unsupported")


def test_backend_without_the_op_is_ignored():
    sel = registry(fake("bwd_only", ops=("chunk_kda_bwd",))).select(OP, {}, CUDA0)
    assert sel == ("triton", None, f"no CUDA backend registered for {OP}")


def test_env_switch_off(monkeypatch):
    loads = []
    reg = registry(fake("sm90", env_switch="KDA_FAKE_SM90", loads=loads))
    monkeypatch.setenv("KDA_FAKE_SM90", "0")
    sel = reg.select(OP, {}, CUDA0)
    assert sel.name == "triton" and "sm90: disabled by KDA_FAKE_SM90=0" in sel.reason
    assert loads == []
    monkeypatch.setenv("KDA_FAKE_SM90", "1")
    assert reg.select(OP, {}, CUDA0).name == "sm90"


def test_forcing_triton(monkeypatch):
    loads = []
    reg = registry(fake("sm90", priority=9, loads=loads))
    monkeypatch.setenv(ENV_VAR, "triton")
    assert reg.select(OP, {}, CUDA0) == ("triton", None, f"forced by {ENV_VAR}=triton")
    assert loads == []


def test_forcing_a_backend_over_a_higher_priority_one(monkeypatch):
    reg = registry(fake("low", priority=1), fake("high", priority=9))
    monkeypatch.setenv(ENV_VAR, "low")
    sel = reg.select(OP, {}, CUDA0)
    assert sel.name == "low" and sel.fn() == "low" and sel.reason == f"forced by {ENV_VAR}=low: fits"


@pytest.mark.parametrize("backend, device, reason", [
    pytest.param(fake("sm90", verdict=(False, "K=300 > 128")), CUDA0, r"cannot take this chunk_kda_fwd call: "
                 r"verifier: K=300 > 128", id="verifier"),
    pytest.param(fake("sm90", ops=("chunk_kda_bwd",)), CUDA0, r"it implements \['chunk_kda_bwd'\], not chunk_kda_fwd",
                 id="op"),
    pytest.param(fake("sm90", capabilities=((10, 0),)), CUDA0, r"compute capability 9\.0 of cuda:0 is not supported",
                 id="capability"),
    pytest.param(fake("sm90"), torch.device("cpu"), r"inputs are on cpu, not a CUDA device", id="cpu"),
    pytest.param(fake("sm90", loader=lambda: 1 / 0), CUDA0, r"loader failed: ZeroDivisionError", id="loader"),
])
def test_forcing_a_backend_that_cannot_take_the_call(monkeypatch, backend, device, reason):
    reg = registry(backend)
    monkeypatch.setenv(ENV_VAR, "sm90")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}=sm90 forces backend 'sm90'.*{reason}"):
        reg.select(OP, {}, device)
    assert reg.backend_report() == []


def test_unknown_backend_name(monkeypatch):
    reg = registry(fake("sm90"), fake("sm100"))
    monkeypatch.setenv(ENV_VAR, "sm80")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}='sm80' names no known backend; expected one of: auto, triton, "
                                         r"sm90, sm100\."):
        reg.select(OP, {}, CUDA0)


def test_loader_failure_is_reported_skipped_and_not_retried():
    attempts = []

    def broken_loader():
        attempts.append(1)
        raise ImportError("cuda_fast._sm90 was not built")

    reg = registry(fake("sm90", priority=9, loader=broken_loader), fake("fallback", priority=1))
    for _ in range(2):
        sel = reg.select(OP, {}, CUDA0)
        assert sel.name == "fallback"
        assert "skipped sm90: loader failed: ImportError: cuda_fast._sm90 was not built" in sel.reason
    assert attempts == [1]


def test_describe_is_appended_to_every_selection_reason_after_loading():
    backend = fake("sm90", priority=9)
    described = Backend(name="sm90", ops=backend.ops, capabilities=backend.capabilities, priority=9,
                        verifiers=backend.verifiers, loader=backend.loader, describe=lambda: "library: packaged (x.so)")
    reg = registry(described)
    for _ in range(2):
        assert reg.select(OP, {}, CUDA0).reason == "sm90 (priority 9): fits; library: packaged (x.so)"


def test_loader_returning_a_non_callable_is_rejected():
    sel = registry(fake("sm90", loader=lambda: None)).select(OP, {}, CUDA0)
    assert sel.name == "triton" and "sm90: loader returned NoneType, not a callable" in sel.reason


def test_loader_runs_lazily_once():
    loads = []
    reg = registry(fake("sm90", loads=loads))
    assert loads == []
    for _ in range(3):
        assert reg.select(OP, {}, CUDA0).name == "sm90"
    assert loads == ["sm90"]


@pytest.mark.parametrize("capabilities, device_cc, chosen", [
    pytest.param(((9, 0),), (10, 0), "triton", id="set-mismatch"),
    pytest.param(((9, 0), (10, 0)), (10, 0), "sm9x", id="set-match"),
    pytest.param(lambda cc: cc >= (9, 0), (8, 9), "triton", id="predicate-mismatch"),
    pytest.param(lambda cc: cc >= (9, 0), (12, 0), "sm9x", id="predicate-match"),
])
def test_capability(capabilities, device_cc, chosen):
    sel = registry(fake("sm9x", capabilities=capabilities), capability=device_cc).select(OP, {}, CUDA0)
    assert sel.name == chosen
    if chosen == "triton":
        assert f"compute capability {device_cc[0]}.{device_cc[1]} of cuda:0 is not supported" in sel.reason


def test_cpu_and_no_cuda_go_to_triton():
    loads = []
    reg = registry(fake("sm90", loads=loads))
    assert reg.select(OP, {}, "cpu") == ("triton", None, "inputs are on cpu, not a CUDA device")
    no_cuda = registry(fake("sm90", loads=loads), capability=None)
    assert no_cuda.select(OP, {}, CUDA0) == ("triton", None, "CUDA is not available")
    assert loads == []


def test_default_capability_fn_does_not_touch_cuda_for_a_cpu_device(monkeypatch):
    def no_cuda_calls():
        raise AssertionError("CUDA was queried for a CPU device")

    monkeypatch.setattr(torch.cuda, "is_available", no_cuda_calls)
    monkeypatch.setattr(torch.cuda, "get_device_capability", no_cuda_calls)
    assert cuda_capability(torch.device("cpu")) is None
    assert Registry().select(OP, {}, "cpu") == ("triton", None, "inputs are on cpu, not a CUDA device")


def test_injected_capability_admits_any_device_type():
    reg = Registry(capability_fn=lambda device: (9, 0))
    reg.register(fake("sm90"))
    assert reg.select(OP, {}, "cpu").name == "sm90"


def test_capability_read_lazily_and_cached_per_device():
    calls = []
    reg = registry(fake("sm90"), calls=calls)
    assert calls == []
    for device in ("cuda:0", "cuda:0", "cuda:1", "cpu:0", "cuda:1", "cpu:0", "cuda:0"):
        reg.select(OP, {}, device)
    assert calls == ["cuda:0", "cuda:1", "cpu:0"]


def test_report_contents_bounded_and_clearable(monkeypatch):
    reg = registry(fake("sm90", ops=(OP, "chunk_kda_bwd")))
    reg.select(OP, {}, CUDA0)
    reg.select("chunk_kda_bwd", {}, "cpu")
    monkeypatch.setenv(ENV_VAR, "triton")
    reg.select(OP, {}, CUDA0)
    assert reg.backend_report() == [
        ReportEntry("sm90", OP, "sm90 (priority 0): fits"),
        ReportEntry("triton", "chunk_kda_bwd", "inputs are on cpu, not a CUDA device"),
        ReportEntry("triton", OP, f"forced by {ENV_VAR}=triton"),
    ]
    for i in range(40):
        reg.select(f"op{i}", {}, CUDA0)
    report = reg.backend_report()
    assert len(report) == 32 and report[0].op == "op8" and report[-1].op == "op39"
    reg.clear_backend_report()
    assert reg.backend_report() == []


def test_rejection_logged_once_at_info(caplog):
    verdict = [False, "K=300 > 128"]
    backend = Backend(name="sm90", ops=frozenset({OP}), capabilities={(9, 0)},
                      verifiers={OP: lambda args: tuple(verdict)}, loader=lambda: impl("sm90"))
    reg = registry(backend)
    with caplog.at_level(logging.INFO, logger="triton_kda.backend"):
        for _ in range(3):
            reg.select(OP, {}, CUDA0)
        verdict[1] = "V=512 > 256"
        reg.select(OP, {}, CUDA0)
        reg.select(OP, {}, CUDA0)
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert records == [
        ("triton_kda.backend", logging.INFO, f"backend sm90 rejected for {OP}: verifier: K=300 > 128"),
        ("triton_kda.backend", logging.INFO, f"backend sm90 rejected for {OP}: verifier: V=512 > 256"),
    ]


@pytest.mark.parametrize("overrides, exc, match", [
    pytest.param({"name": "triton"}, ValueError, r"other than 'auto' and 'triton', got 'triton'", id="reserved-name"),
    pytest.param({"ops": frozenset()}, ValueError, r"`ops` must be a non-empty set", id="no-ops"),
    pytest.param({"capabilities": {(9,)}}, ValueError, r"`capabilities` must be a predicate or", id="bad-capability"),
    pytest.param({"priority": "high"}, TypeError, r"`priority` must be an int", id="priority-str"),
    pytest.param({"env_switch": ""}, ValueError, r"`env_switch` must be None or a variable name", id="empty-switch"),
    pytest.param({"verifiers": {}}, ValueError, r"`verifiers` must map every op in \['chunk_kda_fwd'\]",
                 id="missing-verifier"),
    pytest.param({"loader": "cuda_fast._sm90"}, TypeError, r"`loader` must be callable, got str", id="loader-str"),
])
def test_backend_declaration_errors(overrides, exc, match):
    fields = dict(name="sm90", ops=frozenset({OP}), capabilities={(9, 0)}, verifiers={OP: lambda args: (True, "")},
                  loader=lambda: impl("sm90"))
    fields.update(overrides)
    with pytest.raises(exc, match=match):
        Backend(**fields)


def test_backend_normalises_ops_and_capabilities():
    backend = Backend(name="sm90", ops=OP, capabilities=[[9, 0]], verifiers={OP: lambda args: (True, "")},
                      loader=lambda: impl("sm90"))
    assert backend.ops == frozenset({OP}) and backend.capabilities == frozenset({(9, 0)})
    assert backend.supports((9, 0)) and not backend.supports((9, 1))


def test_register_errors():
    reg = registry(fake("sm90"))
    with pytest.raises(ValueError, match=r"A backend named 'sm90' is already registered"):
        reg.register(fake("sm90"))
    with pytest.raises(TypeError, match=r"register\(\) takes a Backend, got dict"):
        reg.register({"name": "sm100"})
    assert [b.name for b in reg.registered()] == ["sm90"]


def test_module_level_api_uses_the_default_registry():
    backends.clear_backend_report()
    sel = backends.select(OP, {}, torch.device("cpu"))
    assert sel == ("triton", None, "inputs are on cpu, not a CUDA device")
    assert backends.backend_report() == [ReportEntry("triton", OP, "inputs are on cpu, not a CUDA device")]
    backends.clear_backend_report()
    assert backends.registered() == backends.default_registry.registered()


def test_module_level_api_follows_a_swapped_default_registry(monkeypatch):
    reg = registry()
    monkeypatch.setattr(backends, "default_registry", reg)
    backends.register(fake("sm90"))
    assert [b.name for b in backends.registered()] == ["sm90"]
    assert backends.select(OP, {}, CUDA0).name == "sm90"
    assert backends.backend_report() == reg.backend_report() == [ReportEntry("sm90", OP, "sm90 (priority 0): fits")]
    backends.clear_backend_report()
    assert reg.backend_report() == []


def test_providers_register_their_backends_once_on_first_use(monkeypatch):
    reg = registry(providers=("fake_provider",))
    provider = types.ModuleType("fake_provider")
    provider.BACKENDS = (fake("sm90", priority=10),)
    monkeypatch.setitem(sys.modules, "fake_provider", provider)  # after the Registry exists: nothing imported yet
    reg.register(fake("user"))
    assert [b.name for b in reg.registered()] == ["sm90", "user"]
    provider.BACKENDS = (fake("sm100"),)
    assert reg.select(OP, {}, CUDA0).reason == "sm90 (priority 10): fits"
    assert [b.name for b in reg.registered()] == ["sm90", "user"]


@pytest.mark.parametrize("provider, error", [
    pytest.param(None, "ModuleNotFoundError", id="missing"),
    pytest.param(types.ModuleType("fake_provider"), "AttributeError", id="no-BACKENDS"),
])
def test_failing_provider_means_no_backends(monkeypatch, caplog, provider, error):
    if provider is None:
        monkeypatch.delitem(sys.modules, "fake_provider", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "fake_provider", provider)
    reg = registry(providers=("fake_provider",))
    with caplog.at_level(logging.INFO, logger="triton_kda.backend"):
        assert reg.select(OP, {}, CUDA0) == ("triton", None, f"no CUDA backend registered for {OP}")
        assert reg.registered() == ()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and messages[0].startswith(f"no compiled backends from fake_provider: {error}: ")


def test_cuda_fast_is_discovered_on_first_selection_not_at_import():
    code = ("import sys, torch, triton_kda\n"
            "from triton_kda import backends\n"
            "assert 'cuda_fast' not in sys.modules, 'imported by triton_kda'\n"
            "sel = backends.select('chunk_kda_fwd', {}, torch.device('cpu'))\n"
            "import cuda_fast\n"
            "assert backends.registered() == cuda_fast.BACKENDS and backends.PROVIDERS == ('cuda_fast',)\n"
            "print(sel.name, [b.name for b in backends.registered()])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "triton ['sm90_v2', 'sm90', 'sm90_split', 'sm90_bwd']"

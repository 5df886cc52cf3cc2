"""The fla plug-in: `fla.ops.kda.chunk_kda` runs triton_kda for every call the verifier accepts, declines the rest with
a logged reason, and `unregister()` gives the calls back to fla.

fla's own kernels cannot run in the Triton interpreter (fla finds no active driver), so on the CPU a call through fla
that succeeds and equals triton_kda's result bit for bit went through the plug-in. The GPU test runs fla's
`KimiDeltaAttention` layer.
"""
import argparse
import logging
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("fla.ops.kda")

import fla.ops.kda  # noqa: E402

import triton_kda  # noqa: E402
from benchmarks.stack_check import fla_layer, plugin_vs_direct  # noqa: E402
from tests.utils import make_inputs  # noqa: E402
from triton_kda import integrations  # noqa: E402
from triton_kda.chunk import chunk_kda  # noqa: E402
from triton_kda.integrations import fla as plugin  # noqa: E402

interpreter_only = pytest.mark.skipif(torch.cuda.is_available(),
                                      reason="runs the plug-in on CPU tensors through the Triton interpreter")
GRAD_NAMES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.delenv(integrations.ENV_FLA_PLUGIN, raising=False)
    plugin.register()
    plugin.reset_stats()
    yield
    plugin.unregister()


@pytest.fixture
def spy(monkeypatch):
    """Calls of triton_kda.chunk_kda (the function the plug-in runs)."""
    calls = []
    real = triton_kda.chunk_kda

    def chunk_kda(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(triton_kda, "chunk_kda", chunk_kda)
    return calls


def _fwd_bwd(fn, d):
    leaves = {n: d[n].detach().requires_grad_(True) for n in GRAD_NAMES if n in d}
    o, ht = fn(**{**d, **leaves})
    (o.sum() + ht.square().sum()).backward()
    return [o, ht, *(leaves[n].grad for n in leaves)]


@interpreter_only
def test_fla_chunk_kda_runs_ours_until_unregistered(registered, spy):
    d = make_inputs(1, 45, 1, 2, 16, 16, seqlens=[20, 25], use_gate_in_kernel=True, lower_bound=-4.0,
                    use_qk_l2norm_in_kernel=True, initial_state=True, output_final_state=True)
    d.update(safe_gate=True, chunk_size=32)
    through_fla = _fwd_bwd(fla.ops.kda.chunk_kda, d)
    assert len(spy) == 1 and plugin.stats() == dict(accepted=1, declined=0, served=1)
    direct = _fwd_bwd(chunk_kda, d)
    for i, (a, b) in enumerate(zip(through_fla, direct, strict=True)):
        assert torch.equal(a, b), f"output {i} differs"
    plugin.unregister()
    assert not plugin.registered()
    calls = len(spy)
    with pytest.raises(RuntimeError, match="active drivers"):  # fla's own kernels, which need a GPU driver
        fla.ops.kda.chunk_kda(**d)
    assert len(spy) == calls
    plugin.register()
    assert plugin.registered()


@interpreter_only
def test_declined_calls_go_to_fla_with_the_reason_logged_every_time(registered, spy, caplog):
    d = make_inputs(1, 20, 1, 1, 16, 16)
    reason = "keyword(s) ['not_a_kda_option'] are not chunk_kda's (fla ignores them)"
    with caplog.at_level(logging.INFO, logger="triton_kda.integrations.fla"):
        for _ in range(2):
            with pytest.raises(RuntimeError, match="active drivers"):
                fla.ops.kda.chunk_kda(**d, not_a_kda_option=1)
    assert spy == []
    assert [r.getMessage() for r in caplog.records if r.name == "triton_kda.integrations.fla"] == \
        [f"fla.ops.kda.chunk_kda: triton_kda declined the call: {reason}"] * 2
    assert plugin.stats() == dict(accepted=0, declined=2, served=0)


def test_decline_reasons(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    d = make_inputs(1, 8, 1, 1, 16, 16, device="cpu")
    assert plugin.decline_reason(**d) is None
    assert plugin.decline_reason(**d, chunk_size=32, A_log=None) is None
    cases = {
        "cp_context (multi-GPU context parallel) is not implemented": dict(cp_context=object()),
        "use_graph / max_num_seqs": dict(use_graph=True),
        "use_graph / max_num_seqs ": dict(max_num_seqs=4),
        "keyword(s) ['ssm_state_indices'] are not chunk_kda's": dict(ssm_state_indices=None),
    }
    for reason, extra in cases.items():
        assert plugin.decline_reason(**d, **extra).startswith(reason.strip())
    assert plugin.decline_reason(d["q"]).startswith("the arguments do not bind to chunk_kda's signature")
    bf16 = {k: v.bfloat16() if k != "beta" else v for k, v in d.items() if isinstance(v, torch.Tensor)}
    assert plugin.decline_reason(**bf16) == "bf16 on the CPU: the Triton interpreter computes bf16 wrongly"
    meta = {k: v.to("meta") for k, v in d.items() if isinstance(v, torch.Tensor)}
    assert plugin.decline_reason(**meta).startswith("inputs are on meta: triton_kda runs on CUDA devices")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert plugin.decline_reason(**d).startswith("inputs are on cpu")
    monkeypatch.setenv(integrations.ENV_FLA_PLUGIN, "0")
    assert plugin.decline_reason(**d) == f"disabled by {integrations.ENV_FLA_PLUGIN}=0"


def test_env_switch_registers_now_or_when_fla_is_imported(monkeypatch, tmp_path):
    plugin.unregister()
    monkeypatch.setenv(integrations.ENV_FLA_PLUGIN, "")
    integrations.enable_from_env()
    assert not plugin.registered()
    monkeypatch.setenv(integrations.ENV_FLA_PLUGIN, "1")
    integrations.enable_from_env()  # fla.ops.kda is imported already: registers at once
    assert plugin.registered()
    plugin.unregister()
    monkeypatch.setenv(integrations.ENV_FLA_PLUGIN, "yes")
    with pytest.raises(ValueError, match="TRITON_KDA_FLA_PLUGIN must be 0 or 1"):
        integrations.enable_from_env()
    # the import hook: the callback runs once, right after the module body
    (tmp_path / "kda_hook_probe.py").write_text("executed = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    monkeypatch.setattr(sys, "meta_path", [integrations._AfterImport(
        "kda_hook_probe", lambda: seen.append(sys.modules["kda_hook_probe"].executed)), *sys.meta_path])
    import kda_hook_probe  # noqa: F401

    assert seen == [True] and not any(isinstance(f, integrations._AfterImport) for f in sys.meta_path)


def test_env_switch_in_a_fresh_process():
    """TRITON_KDA_FLA_PLUGIN=1 and `import triton_kda` before fla: fla's KDA module gets the plug-in on import."""
    code = ("import triton_kda, fla.ops.kda; from triton_kda.integrations import fla as p; "
            "assert p.registered(), 'not registered'; print('registered')")
    env = dict(os.environ, TRITON_KDA_FLA_PLUGIN="1", TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "registered", out.stderr[-2000:]


@pytest.mark.gpu
def test_fla_kda_layer_with_the_plugin_matches_ours_directly():
    pytest.importorskip("fla.layers", reason="fla's layers come with flash-linear-attention")
    args = argparse.Namespace(B=2, T=300, H=2, K=128, D=256, dtype="bfloat16")
    result = plugin_vs_direct(*fla_layer(args, torch.device("cuda")))
    assert result["plugin_out_identical"]
    assert result["plugin_grad_rel_err"] <= 2 * result["direct_repeat_grad_rel_err"]
    assert result["served"] == result["accepted"] == 1 and result["declined"] == 0

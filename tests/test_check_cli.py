"""kda-check's logic with fake results (thresholds, tables, baselines, exit codes, argument parsing), the runner
with fake backends built on the oracle, and one end-to-end smoke run of the real quick grid."""
from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import replace

import pandas as pd
import pytest
import torch

from reference.harness import GATE_REGIMES, LAYOUTS, regime_inputs
from reference.kda import kda_recurrent
from tests.utils import NoBackward
from triton_kda.check import cli
from triton_kda.check.baseline import FLOORS, compare_baseline, load_baseline, regressed, save_baseline
from triton_kda.check.grid import CheckConfig, full_grid, quick_grid, regime_grid
from triton_kda.check.portability import PortabilityRow, WorkerStartError, default_jobs
from triton_kda.check.runner import (
    Backend,
    Row,
    _call_kwargs,
    available_backends,
    check_config,
    fla_sample,
    threshold,
    upstream_grads,
)
from triton_kda.check.table import build_table, compare_with_fla, exit_code, render, worse_than_fla
from triton_kda.specs import compile_specs

NAN = math.nan


def _row(config="cfg", backend="triton", tensor="o", rel=1e-6, mx=2e-6, thr=1e-5, passed=None, info=False, reason="",
         terms=None):
    judged = rel if terms is None else terms
    return Row(config, backend, tensor, rel, mx, thr, judged <= thr if passed is None else passed, info, reason, terms)


# ---------------------------------------------------------------- thresholds

@pytest.mark.parametrize(
    ("tensor", "dtype", "expected"),
    [
        ("o", "fp32", 1e-5), ("dg", "fp32", 1e-5), ("dh0", "fp32", 1e-5),
        ("o", "fp16", 5e-3), ("final_state", "bf16", 5e-3),
        ("dq", "fp16", 8e-3), ("dk", "bf16", 8e-3), ("dv", "fp16", 8e-3),
        ("dg", "bf16", 2e-2), ("dbeta", "fp16", 2e-2),
        ("dA_log", "bf16", 1e-2), ("ddt_bias", "fp16", 1e-2), ("dh0", "bf16", 1e-2),
    ],
    ids=lambda x: str(x),
)
def test_threshold_lookup(tensor, dtype, expected):
    assert threshold(tensor, dtype) == expected


@pytest.mark.parametrize(("tensor", "dtype", "match"), [("dz", "fp32", "`tensor`"), ("o", "fp64", "`dtype`")],
                         ids=["unknown-tensor", "unknown-dtype"])
def test_threshold_rejects_unknown(tensor, dtype, match):
    with pytest.raises(ValueError, match=match):
        threshold(tensor, dtype)


# ---------------------------------------------------------------- grids

def test_quick_grid_is_tiny_and_covers_the_flags():
    grid = quick_grid()
    ids = [c.id for c in grid]
    assert len(set(ids)) == len(ids)
    assert 8 <= len(grid) <= 16
    assert all(c.T <= 80 and c.K <= 32 and c.V <= 32 and c.dtype in ("fp32", "fp16") for c in grid)
    for flag in ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "safe_gate", "use_beta_sigmoid_in_kernel",
                 "allow_neg_eigval", "initial_state", "output_final_state", "state_v_first"):
        assert any(getattr(c, flag) for c in grid), flag
    assert any(c.lower_bound is not None for c in grid)
    assert any(c.seqlens is not None and 0 in c.seqlens for c in grid)
    assert any(c.HV > c.H for c in grid)
    assert {c.chunk_size for c in grid} == {32, 64}
    assert any(c.T < 64 for c in grid) and any(c.T % 64 for c in grid if c.T > 64)


def test_full_grid_dtypes():
    grid = full_grid(("fp32", "bf16"))
    assert {c.dtype for c in grid} == {"fp32", "bf16"}
    assert len({c.id for c in grid}) == len(grid)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [(dict(dtype="fp64"), "`dtype`"), (dict(gate="soft"), "`gate`"), (dict(seqlens=(3, 4)), "varlen")],
    ids=["bad-dtype", "bad-gate", "bad-seqlens"],
)
def test_check_config_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CheckConfig(1, 8, 1, 1, 16, 16, **kwargs)


# ---------------------------------------------------------------- tables and exit codes

def test_table_columns_status_and_render():
    rows = [
        _row(tensor="o"),
        _row(tensor="dq", rel=NAN, mx=NAN, passed=False, reason="backward not implemented"),
        _row(backend="fla", tensor="o", rel=3e-5, info=True),
    ]
    df = build_table(rows)
    assert list(df.columns) == ["config", "backend", "tensor", "rel_rmse", "rel_terms", "max_abs", "threshold",
                                "passed", "informational", "status", "reason"]
    assert list(df["status"]) == ["pass", "FAIL", "fail (info)"]
    text = render(df)
    assert "backward not implemented" in text and "1.00e-06" in text and " - " in text
    assert text.splitlines()[-1] == "3 rows: 1 failing the run, 1 informational failures"


def test_vs_fla_column_flags_tensors_less_exact_than_fla():
    rows = [
        _row(tensor="o", rel=2e-3, thr=5e-3), _row(tensor="dq", rel=1e-3, thr=8e-3),
        _row(backend="sm90", tensor="o", rel=4e-3, thr=5e-3), _row(config="other", tensor="o", rel=1e-3, thr=5e-3),
        _row(backend="fla", tensor="o", rel=1e-3, thr=5e-3, info=True),
        _row(backend="fla", tensor="dq", rel=2e-3, thr=8e-3, info=True),
    ]
    df = compare_with_fla(build_table(rows))
    assert list(df["vs_fla"]) == ["2.00 worse", "0.50", "4.00 worse", "-", "-", "-"]
    assert list(df["fla_error"].fillna(-1)) == [1e-3, 2e-3, 1e-3, -1, -1, -1]
    assert list(df["status"]) == ["pass"] * 4 + ["pass (info)"] * 2  # informational: no row fails for it
    assert [(r.backend, r.tensor) for r in worse_than_fla(df).itertuples()] == [("triton", "o"), ("sm90", "o")]
    assert render(df).splitlines()[-1] == "6 rows: 0 failing the run, 2 tensors less exact than fla"
    assert "vs_fla" not in compare_with_fla(build_table(rows[:4]))


def test_vs_fla_holds_like_against_like():
    """Chunk backends against fla's chunk_kda, recurrent ones against its fused_recurrent_kda; the summed gradients
    (dA_log, ddt_bias) by their judged error, rel_terms, on both sides."""
    rows = [
        _row(tensor="final_state", rel=3e-3, thr=5e-3), _row(backend="recurrent", tensor="final_state", rel=2e-7),
        _row(backend="fla_recurrent", tensor="final_state", rel=1e-7, info=True),
        _row(tensor="dA_log", rel=8e-3, thr=1e-2, terms=1e-4),
        _row(backend="fla", tensor="dA_log", rel=4e-3, thr=1e-2, terms=2e-4, info=True),
    ]
    df = compare_with_fla(build_table(rows))
    assert list(df["vs_fla"]) == ["-", "2.00 worse", "-", "0.50", "-"]
    assert list(df["fla_error"].fillna(-1)) == [-1, 1e-7, -1, 2e-4, -1]


def test_build_table_rejects_empty():
    with pytest.raises(ValueError, match="empty"):
        build_table([])


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([_row(), _row(tensor="dq")], 0),
        ([_row(), _row(tensor="dq", rel=2e-5)], 1),
        ([_row(), _row(tensor="dq", rel=NAN, mx=NAN, passed=False, reason="backward not implemented")], 1),
        ([_row(), _row(backend="fla", rel=1.0, info=True)], 0),
    ],
    ids=["all-pass", "above-threshold", "backward-missing", "fla-fail-is-info"],
)
def test_exit_code(rows, code):
    assert exit_code(build_table(rows)) == code


# ---------------------------------------------------------------- baselines

@pytest.mark.parametrize(
    ("new", "old", "floor", "expected"),
    [
        (2.1e-5, 1e-5, 1e-6, True),
        (1.9e-5, 1e-5, 1e-6, False),
        (3e-9, 1e-9, 1e-6, False),
        (3e-6, 1e-9, 1e-6, True),
        (NAN, 1e-5, 1e-6, True),
        (1e-5, NAN, 1e-6, False),
        (NAN, NAN, 1e-6, False),
    ],
    ids=["grew-2.1x", "grew-1.9x", "noise-under-floor", "grew-past-floor", "nan-now", "nan-before", "nan-both"],
)
def test_regressed_rule(new, old, floor, expected):
    assert regressed(new, old, floor) is expected


def test_baseline_save_load_roundtrip(tmp_path):
    df = build_table([_row(tensor="o"), _row(tensor="dq", rel=NAN, mx=NAN, passed=False)])
    path = tmp_path / "base.json"
    save_baseline(df, path, {"device": "test"})
    data = json.loads(path.read_text())
    assert data["meta"] == {"device": "test"}
    assert data["rows"][1]["rel_rmse"] is None
    loaded = load_baseline(path)
    assert list(loaded.columns) == ["config", "backend", "tensor", "rel_rmse", "max_abs"]
    assert loaded.loc[0, "rel_rmse"] == 1e-6 and math.isnan(loaded.loc[1, "rel_rmse"])


@pytest.mark.parametrize("content", ["not json", '{"rows": []}', '{"format": "kda-check-baseline/1"}'],
                         ids=["not-json", "no-format", "no-rows"])
def test_load_baseline_rejects_other_files(tmp_path, content):
    path = tmp_path / "base.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="baseline"):
        load_baseline(path)


def test_compare_baseline_flags_growth_only():
    base = pd.DataFrame([
        {"config": "cfg", "backend": "triton", "tensor": "o", "rel_rmse": 1e-6, "max_abs": 1e-6},
        {"config": "cfg", "backend": "triton", "tensor": "dq", "rel_rmse": 1e-9, "max_abs": 1e-9},
        {"config": "cfg", "backend": "triton", "tensor": "dk", "rel_rmse": 2e-6, "max_abs": 1e-6},
        {"config": "cfg", "backend": "fla", "tensor": "o", "rel_rmse": 1e-7, "max_abs": 1e-7},
    ])
    rows = [
        _row(tensor="o", rel=3e-6, mx=1e-6),       # rel_rmse grew 3x above the floor
        _row(tensor="dq", rel=3e-9, mx=3e-9),      # 3x, but noise under the floors
        _row(tensor="dk", rel=2e-6, mx=1e-4),      # max_abs grew 100x
        _row(tensor="dv", rel=1e-6, mx=1e-6),      # not in the baseline
        _row(backend="fla", tensor="o", rel=5e-6, mx=1e-7, info=True),
    ]
    df = compare_baseline(build_table(rows), base)
    assert list(df["regressed"]) == [True, False, True, False, True]
    assert list(df["status"]) == ["REGRESSED", "pass", "REGRESSED", "pass", "regressed (info)"]
    assert math.isnan(df.loc[3, "base_rel_rmse"])
    assert exit_code(df) == 1
    assert exit_code(compare_baseline(build_table(rows[1:2] + rows[3:]), base)) == 0
    assert FLOORS["rel_rmse"] > 3e-9


# ---------------------------------------------------------------- report() and main() with fake runner results

def test_report_writes_outputs_and_baseline(tmp_path, capsys):
    rows = [_row(tensor="o"), _row(tensor="final_state", rel=2e-6)]
    code = cli.report(rows, out=tmp_path / "out", save_to=tmp_path / "base.json", meta={"device": "fake"})
    assert code == 0
    csv = pd.read_csv(tmp_path / "out" / "kda-check.csv")
    assert list(csv["tensor"]) == ["o", "final_state"] and list(csv["status"]) == ["pass", "pass"]
    records = json.loads((tmp_path / "out" / "kda-check.json").read_text())
    assert records[1]["rel_rmse"] == 2e-6
    assert len(load_baseline(tmp_path / "base.json")) == 2
    assert "2 rows: 0 failing the run" in capsys.readouterr().out


def _fake_run_grid(rel):
    def run_grid(configs, backends, device, *, backward, progress=None, jobs=1):
        names = ["o", "dq"] if backward else ["o"]
        return [_row(config=c.id, tensor=n, rel=rel, mx=rel) for c in configs for n in names]
    return run_grid


def test_main_baseline_cycle_with_fake_runner(tmp_path, monkeypatch, capsys):
    base = tmp_path / "base.json"
    monkeypatch.setattr(cli, "run_grid", _fake_run_grid(1e-6))
    assert cli.main(["--quick", "--filter", "fp16", "--save-baseline", str(base), "--out", str(tmp_path)]) == 0
    assert len(load_baseline(base)) == 4  # two fp16 configs x (o, dq)
    monkeypatch.setattr(cli, "run_grid", _fake_run_grid(1.5e-6))
    assert cli.main(["--quick", "--filter", "fp16", "--baseline", str(base)]) == 0
    monkeypatch.setattr(cli, "run_grid", _fake_run_grid(5e-6))
    capsys.readouterr()
    assert cli.main(["--quick", "--filter", "fp16", "--baseline", str(base), "--fwd-only"]) == 1
    out = capsys.readouterr().out
    assert "regressed against the baseline: B1-T64-H1-HV1-K16-V16-fp16-h0-ht triton o" in out
    monkeypatch.setattr(cli, "run_grid", _fake_run_grid(2e-5))
    assert cli.main(["--quick", "--filter", "fp16"]) == 1


def test_run_grid_logs_one_line_per_config_off_a_terminal(monkeypatch, capsys):
    configs = quick_grid()[:2]
    fail_second = {configs[1].id}
    monkeypatch.setattr(cli, "check_config", lambda c, backends, device, backward: [
        _row(config=c.id, rel=1.0 if c.id in fail_second else 1e-6),
        _row(config=c.id, backend="fla", rel=1.0, info=True)])
    rows = cli.run_grid(configs, [], torch.device("cpu"), backward=False)
    assert len(rows) == 4
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"kda-check [1/2] {configs[0].id}: ") and lines[0].endswith(" s, 0 failed")
    assert lines[1].startswith(f"kda-check [2/2] {configs[1].id}: ") and lines[1].endswith(" s, 1 failed")
    cli.run_grid(configs, [], torch.device("cpu"), backward=False, progress=False)
    assert capsys.readouterr().err == ""


def test_run_grid_in_worker_processes_matches_one_process():
    ids = ("B1-T20-H1-HV1-K16-V32-fp32-strong", "B1-T48-H1-HV2-K16-V16-fp32-ht")
    configs = [c for c in quick_grid() if c.id in ids]
    assert len(configs) == 2
    backends = available_backends(torch.device("cpu"))
    one = cli.run_grid(configs, backends, torch.device("cpu"), backward=True, progress=False)
    two = cli.run_grid(configs, backends, torch.device("cpu"), backward=True, progress=False, jobs=2)
    assert two == one and all(r.passed for r in one)


def test_run_grid_reports_a_dead_worker_as_failed_rows():
    configs = quick_grid()[:1]
    unpicklable = Backend("local", lambda **kw: kw)
    rows = cli.run_grid(configs, [unpicklable], torch.device("cpu"), backward=False, progress=False, jobs=2)
    assert len(rows) == 1 and not rows[0].passed and rows[0].reason.startswith("worker process failed")


def test_main_passes_jobs(monkeypatch):
    seen = []

    def run_grid(configs, backends, device, *, backward, progress=None, jobs=1):
        seen.append(jobs)
        return _fake_run_grid(1e-6)(configs, backends, device, backward=backward)

    monkeypatch.setattr(cli, "run_grid", run_grid)
    assert cli.main(["--quick", "--filter", "fp16", "--jobs", "3"]) == 0
    assert cli.main(["--quick", "--filter", "fp16"]) == 0
    assert cli.main(["--quick", "--filter", "fp16-h0-ht", "--jobs", "3"]) == 0
    assert seen == [2, 1, 1]  # at most one worker per config; one process by default without CUDA


def test_main_list_and_filter(capsys):
    assert cli.main(["--quick", "--list", "--filter", "seqlens"]) == 0
    ids = capsys.readouterr().out.split()
    assert ids and all("seqlens" in i for i in ids)
    assert cli.main(["--quick", "--filter", "no-such-config"]) == cli.USAGE_ERROR


def test_main_bad_baseline_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "run_grid", _fake_run_grid(1e-6))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert cli.main(["--quick", "--filter", "fp16", "--baseline", str(bad)]) == cli.USAGE_ERROR
    assert cli.main(["--quick", "--filter", "fp16", "--baseline", str(tmp_path / "missing.json")]) == cli.USAGE_ERROR


_BAD_ARGV = {
    "quick-and-full": ["--quick", "--full"],
    "arch-without-portability": ["--arch", "89"],
    "all-without-portability": ["--all"],
    "arch-and-all": ["--portability", "--arch", "89", "--all"],
    "portability-filter": ["--portability", "--filter", "x"],
    "portability-fwd-only": ["--portability", "--fwd-only"],
    "portability-no-fla": ["--portability", "--no-fla"],
    "unknown-arch": ["--portability", "--arch", "75"],
    "arch-not-a-number": ["--portability", "--arch", "sm90"],
    "zero-jobs": ["--portability", "--jobs", "0"],
    "jobs-not-a-number": ["--portability", "--jobs", "all"],
    "unknown-option": ["--bogus"],
}


@pytest.mark.parametrize("argv", list(_BAD_ARGV.values()), ids=list(_BAD_ARGV))
def test_main_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == cli.USAGE_ERROR


@pytest.mark.parametrize("argv", [["--arch", "80,91"], ["--arch", "89", "--all"]], ids=["unknown", "with-all"])
def test_portability_main_rejects_bad_arch(argv):
    with pytest.raises(SystemExit) as exc:
        cli.portability_main(argv)
    assert exc.value.code == cli.USAGE_ERROR


@pytest.mark.parametrize(("text", "archs"), [("89,90", (89, 90)), ("120", (120,)), ("80, 86", (80, 86))],
                         ids=["89-90", "120", "spaces"])
def test_parse_archs(text, archs):
    assert cli.parse_archs(text) == archs


def test_portability_main_rejects_bad_jobs():
    with pytest.raises(SystemExit) as exc:
        cli.portability_main(["--jobs", "-2"])
    assert exc.value.code == cli.USAGE_ERROR


@pytest.mark.parametrize(("text", "jobs"), [("1", 1), ("16", 16), (" 3", 3)], ids=["1", "16", "space"])
def test_parse_jobs(text, jobs):
    assert cli.parse_jobs(text) == jobs


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "", "auto"])
def test_parse_jobs_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="positive number of worker processes"):
        cli.parse_jobs(text)


def _fake_portability(monkeypatch, outcome):
    """cli's portability run without compiles: record the arguments check_portability got, then `outcome()`."""
    calls = []

    def check_portability(specs_for_arch, archs, jobs):
        calls.append((specs_for_arch, tuple(archs), jobs))
        return outcome()

    monkeypatch.setattr(cli, "_interpreting", lambda: False)
    monkeypatch.setattr(cli, "check_portability", check_portability)
    return calls


def _portability_row(passed=True):
    return PortabilityRow("k", 89, 4, 1, 1024, 101376, 64, 0, 0, passed)


@pytest.mark.parametrize(("argv", "jobs"), [(["--jobs", "3"], 3), ([], "default")], ids=["jobs-3", "default"])
def test_portability_passes_jobs(monkeypatch, capsys, argv, jobs):
    calls = _fake_portability(monkeypatch, lambda: [_portability_row()])
    assert cli.portability_main(["--arch", "89", *argv]) == 0
    expected = default_jobs() if jobs == "default" else jobs
    assert calls == [(compile_specs, (89,), expected)]
    assert capsys.readouterr().out.startswith("kda-portability: compiling for sm_89 in ")


def _no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _gpu(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)


_ARCH_CHOICES = {  # (GPU compute capability or None, argv) -> architectures compiled, one call each
    "no-gpu-default": (None, [], (89, 90)),
    "no-gpu-all": (None, ["--all"], (80, 86, 89, 90, 100, 120)),
    "no-gpu-arch": (None, ["--arch", "120,80"], (120, 80)),
    "h100-default": ((9, 0), [], (90,)),
    "rtx4090-default": ((8, 9), [], (89,)),
    "b200-default": ((10, 0), [], (100,)),
    "unsupported-gpu-default": ((7, 5), [], (89, 90)),
    "h100-arch": ((9, 0), ["--arch", "86"], (86,)),
    "h100-all": ((9, 0), ["--all"], (80, 86, 89, 90, 100, 120)),
}


@pytest.mark.parametrize(("capability", "argv", "archs"), list(_ARCH_CHOICES.values()), ids=list(_ARCH_CHOICES))
def test_portability_architectures(monkeypatch, capsys, capability, argv, archs):
    _no_gpu(monkeypatch) if capability is None else _gpu(monkeypatch, capability)
    calls = _fake_portability(monkeypatch, lambda: [_portability_row()])
    assert cli.portability_main([*argv, "--jobs", "2"]) == 0
    assert calls == [(compile_specs, (arch,), 2) for arch in archs]
    out, err = capsys.readouterr()
    assert out.startswith(f"kda-portability: compiling for {', '.join(f'sm_{a}' for a in archs)} in 2 worker ")
    progress = [line for line in err.splitlines() if line.startswith("kda-portability [")]
    n = len(archs)
    assert progress == [line for i, a in enumerate(archs, 1) for line in (
        f"kda-portability [{i}/{n}] sm_{a}: compiling",
        f"kda-portability [{i}/{n}] sm_{a}: 1 configurations, 0 failed, 0 s")]


def test_default_archs_without_a_gpu(monkeypatch):
    _no_gpu(monkeypatch)
    assert cli.default_archs() == cli.DEFAULT_ARCHS == (89, 90)


def test_portability_interrupted_exits_130(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    _fake_portability(monkeypatch, interrupted)
    assert cli.main(["--portability", "--jobs", "2"]) == cli.INTERRUPTED == 130
    assert "kda-portability: interrupted; no table written" in capsys.readouterr().err


def test_portability_workers_that_cannot_start_exit_1(monkeypatch, capsys):
    def cannot_start():
        raise WorkerStartError("a kda-portability worker process exited (exit code 1) before it could take a job")

    _fake_portability(monkeypatch, cannot_start)
    assert cli.main(["--portability"]) == 1
    assert "kda-portability: a kda-portability worker process exited (exit code 1)" in capsys.readouterr().err


def test_portability_failed_row_exits_1(monkeypatch):
    _fake_portability(monkeypatch, lambda: [_portability_row(), _portability_row(passed=False)])
    assert cli.main(["--portability", "--arch", "89,90"]) == 1


# ---------------------------------------------------------------- the runner, with fake backends on the oracle

def _oracle_backend(**kw):
    o, ht = kda_recurrent(**kw)
    return o.to(kw["q"].dtype), (ht.float() if ht is not None else None)


def _oracle_without_backward(**kw):
    o, ht = _oracle_backend(**kw)
    return NoBackward.apply(o), (NoBackward.apply(ht) if ht is not None else None)


def _nan_output(**kw):
    o, ht = _oracle_backend(**kw)
    return o.index_fill(1, torch.tensor([3]), math.nan), ht


def _raises(**kw):
    raise RuntimeError("no kernel for this shape\nsecond line")


_GVA_VARLEN_H0 = CheckConfig(1, 21, 1, 2, 8, 8, seqlens=(5, 0, 16), use_gate_in_kernel=True, initial_state=True,
                             output_final_state=True)


def test_runner_passes_the_oracle_itself():
    rows = check_config(_GVA_VARLEN_H0, [Backend("oracle", _oracle_backend)], torch.device("cpu"))
    assert [r.tensor for r in rows] == ["o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias",
                                        "dh0"]
    for r in rows:
        assert r.passed and r.rel_rmse < 1e-6 and r.reason == "", r
        assert r.config == _GVA_VARLEN_H0.id and r.threshold == 1e-5


_SUMMED = ("dA_log", "ddt_bias")
_TERMS_CASES = [CheckConfig(1, 40, 1, 1, 16, 16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True),
                CheckConfig(1, 70, 1, 2, 16, 16, gate="unsaturated", use_qk_l2norm_in_kernel=True,
                            use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True)]


@pytest.mark.parametrize("config", _TERMS_CASES, ids=[c.id for c in _TERMS_CASES])
def test_summed_gradients_are_judged_against_their_terms_and_a_worse_reduction_fails(config, monkeypatch):
    """dA_log and ddt_bias are judged by rel_terms (error over the oracle's sum of |terms|), identically for every
    backend: our Triton backward passes with 3x headroom, and the same backward with its per-chunk partial sums rounded
    to bf16 before the final sum (a reduction made worse, the terms unchanged) fails, its error at least 4x ours."""
    import triton_kda.chunk_bwd as chunk_bwd

    triton = [b for b in available_backends(torch.device("cpu")) if b.name == "triton"]
    rows = {r.tensor: r for r in check_config(config, triton, torch.device("cpu"))}
    for t in _SUMMED:
        assert rows[t].passed and rows[t].rel_terms <= rows[t].threshold / 3, rows[t]
        assert rows[t].rel_terms <= rows[t].rel_rmse  # the sum of |terms| is at least |the sum|
    assert all(r.rel_terms is None for t, r in rows.items() if t not in _SUMMED)

    intra_bwd = chunk_bwd.intra_bwd

    def bf16_partials(*args, **kwargs):
        out = intra_bwd(*args, **kwargs)
        return out._replace(dA_log_part=out.dA_log_part.bfloat16().float(),
                            ddt_bias_part=out.ddt_bias_part.bfloat16().float())

    monkeypatch.setattr(chunk_bwd, "intra_bwd", bf16_partials)
    worse = {r.tensor: r for r in check_config(config, triton, torch.device("cpu"))}
    for t in _SUMMED:
        assert not worse[t].passed and worse[t].rel_terms >= 4 * rows[t].rel_terms, (worse[t], rows[t])
    assert worse["dg"].rel_rmse == rows["dg"].rel_rmse  # the terms themselves unchanged


def test_runner_reports_failures():
    backends = [Backend("nobwd", _oracle_without_backward), Backend("nan", _nan_output),
                Backend("raises", _raises, informational=True)]
    rows = check_config(CheckConfig(1, 12, 1, 1, 8, 8, dtype="fp16"), backends, torch.device("cpu"))
    by = {(r.backend, r.tensor): r for r in rows}
    assert by["nobwd", "o"].passed
    assert not by["nobwd", "dq"].passed and by["nobwd", "dq"].reason == "backward not implemented"
    assert not by["nan", "o"].passed and "8 non-finite" in by["nan", "o"].reason
    assert [r.tensor for r in rows if r.backend == "raises"] == ["o", "dq", "dk", "dv", "dg", "dbeta"]
    assert all(not r.passed and r.informational and r.reason == "forward raised RuntimeError: no kernel for this shape"
               for r in rows if r.backend == "raises")
    assert exit_code(build_table(rows)) == 1


def test_runner_gives_the_oracle_the_upstream_gradients_the_backend_receives():
    """do is rounded to the output's dtype (fp16 here), dht to fp32, before the oracle sees them; the backend receives
    exactly those values, so the caller's rounding of do is not counted as the backend's error."""
    config = CheckConfig(1, 12, 1, 1, 8, 8, dtype="fp16", initial_state=True, output_final_state=True)
    seen = {}

    def recording_backend(**kw):
        o, ht = _oracle_backend(**kw)
        o.register_hook(lambda g: seen.setdefault("do", g))
        ht.register_hook(lambda g: seen.setdefault("dht", g))
        return o, ht

    rows = check_config(config, [Backend("rec", recording_backend)], torch.device("cpu"))
    assert all(r.passed for r in rows), rows
    f64 = torch.float64
    do, dht = upstream_grads(config, {"o": torch.zeros(1, 12, 1, 8, dtype=f64),
                                      "final_state": torch.zeros(1, 1, 8, 8, dtype=f64)}, torch.device("cpu"))
    assert seen["do"].dtype == torch.float16 and torch.equal(seen["do"].double(), do)
    assert seen["dht"].dtype == torch.float32 and torch.equal(seen["dht"].double(), dht)
    unrounded = torch.randn(do.shape, generator=torch.Generator().manual_seed(1234), dtype=f64)
    assert 0 < (do - unrounded).abs().max() < 1e-3


def test_runner_fwd_only():
    rows = check_config(CheckConfig(1, 12, 1, 1, 8, 8), [Backend("oracle", _oracle_backend)], torch.device("cpu"),
                        backward=False)
    assert [r.tensor for r in rows] == ["o"] and rows[0].passed


def test_runner_pins_the_backend_environment(monkeypatch):
    monkeypatch.delenv("TRITON_KDA_BACKEND", raising=False)
    seen = []

    def backend(**kw):
        seen.append(os.environ.get("TRITON_KDA_BACKEND"))
        return _oracle_backend(**kw)

    pinned = Backend("pinned", backend, env=(("TRITON_KDA_BACKEND", "triton"),))
    rows = check_config(CheckConfig(1, 12, 1, 1, 8, 8), [pinned], torch.device("cpu"))
    assert seen == ["triton"] and all(r.passed for r in rows)
    assert "TRITON_KDA_BACKEND" not in os.environ
    assert [(b.name, b.env) for b in available_backends(torch.device("cpu"))] == [
        ("triton", (("TRITON_KDA_BACKEND", "triton"),)), ("recurrent", ()), ("recurrent_pool", ())]


def test_backend_only_restricts_its_configs():
    runs = []

    def backend(**kw):
        runs.append(kw["q"].shape[1])
        return _oracle_backend(**kw)

    picky = Backend("picky", backend, only=lambda c: c.T == 12)
    check_config(CheckConfig(1, 12, 1, 1, 8, 8), [picky], torch.device("cpu"), backward=False)
    assert check_config(CheckConfig(1, 13, 1, 1, 8, 8), [picky], torch.device("cpu"), backward=False) == []
    assert runs == [12]


def test_registered_cuda_backends_join_where_the_capability_fits(monkeypatch):
    from triton_kda.backends import Backend as CudaBackend
    from triton_kda.check import runner

    def compiled(name, capabilities):
        return CudaBackend(name=name, ops={"chunk_kda_fwd"}, capabilities=capabilities,
                           verifiers={"chunk_kda_fwd": lambda args: (True, "fits")}, loader=lambda: None)

    monkeypatch.setattr(runner, "registered", lambda: (compiled("sm90", {(9, 0)}), compiled("sm100", {(10, 0)})))
    monkeypatch.setattr(runner, "cuda_capability", lambda device: (9, 0))
    got = available_backends(torch.device("cuda"), fla=False)
    assert [(b.name, b.env, b.informational) for b in got] == [
        ("triton", (("TRITON_KDA_BACKEND", "triton"),), False), ("recurrent", (), False),
        ("recurrent_pool", (), False), ("sm90", (("TRITON_KDA_BACKEND", "sm90"),), False)]
    monkeypatch.setattr(runner, "cuda_capability", lambda device: None)
    assert [b.name for b in available_backends(torch.device("cpu"), fla=False)] == ["triton", "recurrent",
                                                                                      "recurrent_pool"]


def test_a_backend_that_declines_a_config_gives_no_rows():
    from triton_kda.backends import BackendDeclined

    def declines(**kw):
        raise BackendDeclined("TRITON_KDA_BACKEND=sm90 forces backend 'sm90', which cannot take this call: K > 128")

    rows = check_config(CheckConfig(1, 12, 1, 1, 8, 8), [Backend("sm90", declines)], torch.device("cpu"))
    assert rows == []


def test_decode_configs_and_forward_only_backends():
    from triton_kda.check.runner import is_decode

    assert [c.id for c in quick_grid() if is_decode(c)] == [
        "B3-T1-H1-HV2-K16-V16-fp32-l2norm-gate_in_kernel-lb-5.0-beta_sigmoid-h0-ht",
        "B1-T6-H1-HV2-K16-V32-fp32-seqlens=1,3,0,2-h0-ht-vfirst"]
    assert sum(is_decode(c) for c in full_grid(("bf16",))) == 3
    only_forward = Backend("fwd", _oracle_backend, backward=False)
    rows = check_config(CheckConfig(1, 12, 1, 1, 8, 8, initial_state=True, output_final_state=True), [only_forward],
                        torch.device("cpu"))
    assert [r.tensor for r in rows] == ["o", "final_state"] and all(r.passed for r in rows)


def test_fla_sample_is_every_bf16_gate_in_kernel_config():
    grid = full_grid()
    sample = [c for c in grid if fla_sample(c)]
    assert {c.id for c in sample} == {c.id for c in grid if c.dtype == "bf16" and c.use_gate_in_kernel}
    assert {c.gate for c in sample} >= {"raw", "unsaturated", "masked"}
    assert any(c.seqlens is not None and c.HV > c.H for c in sample)
    assert any(c.lower_bound is None for c in sample) and any(c.safe_gate for c in sample)


def test_full_grid_holds_the_gate_regime_sweep():
    """Every (regime, layout) of `reference.harness`'s sweep, in each dtype, on the inputs the tests draw."""
    grid = full_grid(("bf16",))
    for c in regime_grid():
        assert replace(c, dtype="bf16") in grid
    assert len(regime_grid()) == len(GATE_REGIMES) * len(LAYOUTS)
    c = next(c for c in regime_grid() if c.gate == "unsaturated" and c.seqlens is not None)
    d = regime_inputs("unsaturated", "gva_varlen", torch.float32, 0, device="cpu")
    kw = _call_kwargs(c, torch.device("cpu"))
    assert all(torch.equal(kw[n], d[n]) for n in ("q", "g", "A_log", "dt_bias", "initial_state", "cu_seqlens"))
    assert kw["safe_gate"] == d["safe_gate"] and kw["lower_bound"] == d["lower_bound"]


# ---------------------------------------------------------------- end to end: the real quick grid, one tiny config

def test_smoke_decode_config_end_to_end(tmp_path, capsys):
    """The decode quick config on every CPU backend: chunk_kda, fused_recurrent_kda (forward and backward) and the
    same through an in-place state pool (forward)."""
    code = cli.main(["--quick", "--filter", "B3-T1-", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    df = pd.read_csv(tmp_path / "kda-check.csv")
    assert set(df["backend"]) == {"triton", "recurrent", "recurrent_pool"}
    assert set(df[df["backend"] == "recurrent"]["tensor"]) == {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta",
                                                               "dA_log", "ddt_bias", "dh0"}
    assert set(df[df["backend"] == "recurrent_pool"]["tensor"]) == {"o", "final_state"}
    assert code == 0, out


def test_smoke_quick_grid_end_to_end(tmp_path, capsys):
    code = cli.main(["--quick", "--filter", "B1-T64-H1-HV1-K16-V16-fp32", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    df = pd.read_csv(tmp_path / "kda-check.csv")
    assert set(df["tensor"]) == {"o", "dq", "dk", "dv", "dg", "dbeta"}
    assert code == 0, out

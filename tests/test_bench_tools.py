"""The benchmark tools on the CPU: argument parsing, the no-CUDA exits, their tables from fake rows, one tiny
gate-regime case through the interpreter, and host_time's whole run with its kernels stubbed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import astuple

import pytest
import torch

from benchmarks import ab, bwd_model, cp_check, fwd_model, gate_regimes, impls, roofline, timing


def _row(tree, ms, shape="B2-T8192-H32-HV32-K128-V128", mode="fwdbwd", served=("chunk_kda:triton",)):
    return dict(tree=tree, shape=shape, dtype="bf16", flags="kimi", mode=mode, ms=ms, served=list(served))


def test_ab_parser_and_no_cuda(monkeypatch, tmp_path, capsys):
    args = ab.build_parser().parse_args(["--base", str(tmp_path), "--flags", "kimi,pregated", "--modes", "fwd"])
    assert args.flags == ["kimi", "pregated"] and args.modes == ["fwd"] and args.rounds == 3
    with pytest.raises(SystemExit):
        ab.build_parser().parse_args(["--base", str(tmp_path), "--modes", "bwd"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ab.main(["--base", str(tmp_path)]) == 2
    assert "benchmarks.ab needs a CUDA GPU" in capsys.readouterr().err


def test_ab_table_takes_medians_over_rounds_and_their_ratio():
    rows = [_row("base", ms) for ms in (10.0, 12.0, 11.0)] + [_row("this", ms) for ms in (10.5, 11.5, 30.0)]
    rows += [_row("base", 2.0, mode="fwd"), _row("this", 1.0, mode="fwd", served=("chunk_kda_fwd:sm90",))]
    rows += [_row("this", 1.0, shape="only-this")]  # no base row: left out
    lines = ab.table(rows, "base", "this")
    assert lines[2] == ("| B2-T8192-H32-HV32-K128-V128 | bf16 | kimi | fwdbwd | 11.000 | 11.500 | x1.045 "
                        "| chunk_kda:triton |")
    assert lines[3].endswith("| 2.000 | 1.000 | x0.500 | chunk_kda_fwd:sm90 |")
    assert len(lines) == 5 and lines[-1] == f"summary: this / base geomean x{(11.5 / 11 * 0.5) ** 0.5:.3f} over 2 rows"


def test_ab_child_rows_are_parsed(monkeypatch, tmp_path):
    class Done:
        returncode = 0
        stdout = "compiling\n" + ab.ROW_TAG + json.dumps(_row("x", 1.0)) + "\n"
        stderr = ""

    seen = {}
    monkeypatch.setattr(ab.subprocess, "run", lambda cmd, **kw: seen.update(cmd=cmd, env=kw["env"]) or Done())
    args = ab.build_parser().parse_args(["--base", str(tmp_path)])
    assert ab.run_child(tmp_path, args) == [_row("x", 1.0)]
    assert seen["cmd"][seen["cmd"].index("--child") + 1] == str(tmp_path)
    assert seen["env"]["PYTHONPATH"] == str(ab.HERE)
    Done.returncode, Done.stderr = 1, "boom"
    with pytest.raises(RuntimeError, match="boom"):
        ab.run_child(tmp_path, args)


def test_gate_regimes_parser_and_fla_without_cuda(monkeypatch, capsys):
    args = gate_regimes.build_parser().parse_args(["--regimes", "all", "--layouts", "heads", "--dtypes", "bf16"])
    assert args.regimes == ["saturated", "unsaturated", "softplus", "masked"] and args.layouts == ["heads"]
    assert args.backwards == ["default", "triton_bwd"] and args.seeds == 32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gate_regimes.main(["--regimes", "masked"]) == 2
    assert "--no-fla" in capsys.readouterr().err


def test_gate_regimes_render_marks_rows_worse_than_fla():
    e = dict.fromkeys(gate_regimes.TENSORS, 1e-3)
    rows = [dict(regime="unsaturated", layout="heads", dtype="bf16", impl="default", served="sm90_bwd", errors=e,
                 worst_vs_fla=0.9, worst_tensor="g", spread=0.012),
            dict(regime="unsaturated", layout="heads", dtype="bf16", impl="triton_bwd", served="triton", errors=e,
                 worst_vs_fla=1.2, worst_tensor="A_log", spread=0.03),
            dict(regime="unsaturated", layout="heads", dtype="bf16", impl="fla", served="", errors=e,
                 worst_vs_fla=None, worst_tensor=None, spread=None)]
    lines = gate_regimes.render(rows)
    assert lines[2].startswith("| unsaturated | heads | bf16 | default (sm90_bwd) | 1.00e-03 |")
    assert lines[2].endswith("| 0.900 (g, spread 1.2%) |") and lines[4].endswith("| - |")
    assert lines[-1] == ("summary: 1 of 2 rows of ours at or below fla's error on every tensor; worse: "
                         "unsaturated/heads/bf16/triton_bwd x1.200")


@pytest.mark.slow
def test_gate_regimes_runs_ours_through_the_interpreter(tmp_path, capsys):
    code = gate_regimes.main(["--no-fla", "--regimes", "unsaturated", "--layouts", "gva_varlen", "--dtypes", "fp16",
                              "--seeds", "1", "--T", "40", "--K", "16", "--V", "16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "summary: 1 rows, no fla to compare with" in out
    row = json.loads((tmp_path / "gate_regimes.jsonl").read_text())
    assert row["impl"] == "default" and row["served"] == "triton" and row["worst_vs_fla"] is None
    assert all(0 < row["errors"][n] < 2e-2 for n in gate_regimes.TENSORS)
    (seed,) = row["seeds"]  # the per-seed sums pool again to the row's errors
    assert all(abs((seed[n][0] / seed[n][1]) ** 0.5 - row["errors"][n]) <= 1e-9 * row["errors"][n]
               for n in gate_regimes.TENSORS)
    assert (tmp_path / "gate_regimes.md").read_text().startswith("device: CPU interpreter")


def test_roofline_parses_shapes_and_specs_and_needs_cuda(monkeypatch, capsys):
    assert astuple(roofline.step_shape("B2-T8192-H32"))[:6] == (2, 8192, 32, 32, 128, 128)
    assert astuple(roofline.step_shape("B2-T8192-H16-K256"))[:6] == (2, 8192, 16, 16, 256, 256)
    assert astuple(roofline.step_shape("B2-T8192-H8-HV64-K256-V128"))[:6] == (2, 8192, 8, 64, 256, 128)
    with pytest.raises(ValueError, match="cannot read '2x8192'"):
        roofline.step_shape("2x8192")
    with pytest.raises(ValueError, match="--pkg: expected NAME=DIR:MODULE"):
        roofline.load_spec("head")
    name, fn = roofline.load_spec("cuda=.:triton_kda@TRITON_KDA_TEST_ROOFLINE=1")
    monkeypatch.delenv("TRITON_KDA_TEST_ROOFLINE", raising=False)
    with pytest.raises(TypeError):  # the call reaches chunk_kda (missing arguments) after setting the variable
        fn()
    assert name == "cuda" and os.environ.pop("TRITON_KDA_TEST_ROOFLINE") == "1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert roofline.main(["--shape", "B1-T64-H2"]) == 2
    assert "benchmarks.roofline needs a CUDA GPU" in capsys.readouterr().err


def test_roofline_sends_kept_launches_through_triton():
    from triton_kda import launch

    launch._KEPT["k"] = "kept"
    with roofline.launches_through_triton():
        assert launch._KEPT.get("k") is None
        launch._KEPT["x"] = "dropped"  # what launch_kernel would keep
        assert "x" not in launch._KEPT
    assert launch._KEPT.pop("k") == "kept" and "x" not in launch._KEPT


def test_roofline_table_sets_each_kernel_against_its_floor():
    times = {"_kda_state_fwd_kernel": 100.0, "void (anonymous namespace)::kda_intra_bwd_kernel<1, 2>": 400.0,
             "void at::native::elementwise": 5.0, "void (anonymous namespace)::kda_other_kernel<1>": 50.0}
    nbytes = {"_kda_state_fwd_kernel": 150_000_000, roofline.COMPILED: 300_000_000}
    rows, us, floor = roofline.table("head", times, nbytes, tbps=3.0)
    assert rows[0] == "| head | void (anonymous namespace)::kda_intra_bwd_kernel<1 | 400.0 | 300 | 100.0 | 25% |"
    assert rows[1] == "| head | _kda_state_fwd_kernel | 100.0 | 150 | 50.0 | 50% |"
    assert rows[2] == "| head | void (anonymous namespace)::kda_other_kernel<1> | 50.0 | - | - | - |"
    assert rows[3] == "| head | void at::native::elementwise | 5.0 | - | - | - |"
    assert rows[4] == "| head | our kernels | 550.0 | | 150.0 | 27% |" and (us, floor) == (550.0, 150.0)


def test_host_time_runs_a_stubbed_step(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-m", "benchmarks.host_time", "--T", "16", "--H", "2", "--steps", "2"],
                         capture_output=True, text=True, env=env, timeout=600, check=True).stdout
    assert "us per fwd+bwd step on the host" in out and "_kda_intra_fwd_kernel x1" in out


def test_host_time_gpu_mode_needs_cuda(monkeypatch, capsys):
    from benchmarks import host_time

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert host_time.main(["--gpu", "--shapes", "B1-T64-H2"]) == 2
    assert "benchmarks.host_time --gpu needs a CUDA GPU" in capsys.readouterr().err


def test_cp_check_tables_and_environment(monkeypatch):
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP_CHUNKS", "7")
    with cp_check.cp_env("1"):
        assert os.environ["TRITON_KDA_INTRACARD_CP"] == "1" and "TRITON_KDA_INTRACARD_CP_CHUNKS" not in os.environ
    assert os.environ["TRITON_KDA_INTRACARD_CP_CHUNKS"] == "7"
    assert cp_check.table(["a", "b"], [["1", "2"]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cp_check.main(["--out", "."]) == 2


def test_impls_and_timing_on_the_cpu(monkeypatch):
    for name in ("fla", "fla.ops", "fla.ops.kda"):  # fla not importable, even where a test imported it before
        monkeypatch.setitem(sys.modules, name, None)
    loaded = impls.load_impls(["triton", "fla"])
    assert callable(loaded["triton"]) and loaded["fla"].startswith("fla not importable: ")
    from triton_kda.backends import ENV_VAR, BackendDeclined

    def declining(**kw):
        raise BackendDeclined(f"{os.environ[ENV_VAR]} declines {sorted(kw)}")

    with pytest.raises(NotImplementedError, match=r"sm90 declines \['q'\]"):
        impls.forced_backend(declining, "sm90")(q=1)
    assert impls.forced_backend(lambda **kw: os.environ[ENV_VAR], "triton")() == "triton"
    cpu = torch.device("cpu")
    result, seconds = timing.wall(lambda: 3, cpu)
    assert result == 3 and seconds >= 0.0
    assert timing.peak_memory_gib(lambda: None, cpu) is None


def test_cp_dist_smoke_timings_on_two_cpu_ranks(tmp_path):
    """`benchmarks.cp_dist --smoke --timings-only --T 200` under torchrun: 2 gloo ranks through the interpreter write
    the timings of that length (a partial last chunk on each rank) and the per-rank breakdown (the checks run in
    tests/test_cp.py)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(port), "-m", "benchmarks.cp_dist", "--smoke", "--timings-only", "--T", "200",
                          "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=900)
    md = (tmp_path / "cp_dist.md").read_text() if (tmp_path / "cp_dist.md").exists() else ""
    assert run.returncode == 0, f"exit {run.returncode}\n{md}\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    assert "2 CPU processes (gloo, Triton interpreter)" in md
    rows = [line for line in md.splitlines() if line.startswith("| B1 T")]
    assert [r.split(" | ")[:2] for r in rows] == [["| B1 T200 H2", "fwd"], ["| B1 T200 H2", "fwd+bwd"]]
    assert "## Checks" in md and "| T131072" not in md  # no checks with --timings-only


def test_stack_check_fp64_rows_pass_within_the_margin_of_fla():
    from benchmarks import stack_check

    row = dict(module="KimiDeltaAttention", fla_out_err=2e-3, fla_dx_err=3e-3, fla_dparams_err=4e-3,
               plugin_out_err=2e-3, plugin_dx_err=3e-3 * stack_check.FP64_MARGIN, plugin_dparams_err=1e-3,
               worst_param_ratio=1.2)
    model = dict(row, module="KDAForCausalLM", plugin_out_err=2.2e-3, fla_step_ms=10.0, plugin_step_ms=8.0)
    lines = stack_check.summarize({"fla": {"error": "x"}, "fla_fp64": {"rows": [row, model]}})
    assert lines[1].startswith("PASS fla vs fp64, KimiDeltaAttention") and "x1.20" in lines[1]
    assert lines[2].startswith("FAIL fla vs fp64, KDAForCausalLM") and "step 10.000 -> 8.000 ms" in lines[2]


def test_stack_check_oracle_answers_fla_calls_in_the_callers_dtype():
    from benchmarks.stack_check import oracle_kda
    from reference.kda import kda_recurrent

    torch.manual_seed(0)
    q, k, v, g = (torch.randn(1, 8, 2, 16) for _ in range(4))
    beta = torch.randn(1, 8, 2)
    flags = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                 safe_gate=True, lower_bound=-5.0, A_log=torch.zeros(2), dt_bias=torch.zeros(32), state_v_first=True)
    o, ht = oracle_kda(q, k, v, g, beta, output_final_state=True, **flags)
    ref, ref_ht = kda_recurrent(q, k, v, g, beta, output_final_state=True, **flags)
    assert o.dtype == torch.float32 and torch.equal(o, ref.float()) and torch.equal(ht, ref_ht)


def test_fwd_model_floors_count_bytes_flops_and_the_chain(capsys):
    s = fwd_model.parse_shape("B2-T8192-H32")
    fused, split = (fwd_model.floors(s, d, 3.0, 690.0, 132) for d in ("fused", "split"))
    states = 2 * 2 * 32 * 128 * 128 * 4
    # fused: q, k, v, g (K bf16 each), beta in and o out per token-head; split adds qg, kg, w, u, Aqk and the chunk
    # decay, written once and read once
    assert fused.bytes == 2 * 8192 * 32 * (5 * 256 + 2) + states
    assert split.bytes - fused.bytes == 2 * (2 * 8192 * 32 * (4 * 256 + 128) + 2 * 128 * 32 * 128 * 4)
    assert fused.flops == split.flops == 2 * 8192 * 32 * (6 * 128 * 128 + 2 * 64 * 5 * 128)
    assert fused.steps == 128 and fused.chains == 2 * 32 * 2
    assert fused.byte_us == pytest.approx(fused.bytes / 3.0e6) and fused.floor_us == max(fused[4:])
    assert fused.chain_us == pytest.approx(128 * 4 * 64 * 64 * 128 / (690e12 / 132) * 1e6)
    varlen = fwd_model.floors(fwd_model.Shape(B=1, T=200, H=2, HV=2, seqlens=(130, 0, 70)), "fused", 3.0, 690.0, 132)
    assert varlen.steps == 3 and varlen.chains == 2 * 2 * 2  # the empty sequence has no chain
    with pytest.raises(ValueError, match="design must be"):
        fwd_model.floors(s, "fast", 3.0, 690.0, 132)
    assert fwd_model.main(["--card", "H200", "--seqlens", "100,28"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("H200: copy 4.24 TB/s") and out.count("| fused |") == 3


def test_bwd_model_matches_the_measured_step_and_counts_each_kernel(capsys):
    """The split design's bytes per kernel are the distinct tensors the H100 roofline counted at B2 T8192 H32
    (docs/benchmarks/runs/2026-11-27_step_kernels; its WY backward also counted k, h and rstd_k, passed but unread);
    GVA adds the q/k backward; the fused design moves about half the bytes."""
    s = bwd_model.parse_shape("B2-T8192-H32")
    split = {f.name: f for f in bwd_model.floors(s, "split", 3.0, 690.0, 132)}
    measured_mb = {"intra forward": 1220, "WY recompute": 1151, "state backward": 1145, "chunk-local backward": 2171}
    for name, mb in measured_mb.items():
        assert split[name].bytes / 1e6 == pytest.approx(mb, rel=0.01), name
    assert (split["state forward"].bytes + split["state recompute"].bytes) / 1e6 == pytest.approx(1753, rel=0.01)
    assert (split["WY backward"].bytes + 134.2e6 + 268.4e6 + 2.1e6) / 1e6 == pytest.approx(1818, rel=0.01)
    assert [k.chain for k in bwd_model.kernels(s, "split")].count(True) == 3
    assert split["chunk-local backward"].floor_us == pytest.approx(split["chunk-local backward"].bytes / 3.0e6)
    fused = bwd_model.floors(s, "fused", 3.0, 690.0, 132)
    assert 0.5 < sum(f.bytes for f in fused) / sum(f.bytes for f in split.values()) < 0.55
    gva = [k.name for k in bwd_model.kernels(bwd_model.parse_shape("B2-T8192-H8-HV64"), "split")]
    assert gva[-1] == "q/k backward" and "q/k backward" not in split
    with pytest.raises(ValueError, match="design must be"):
        bwd_model.kernels(s, "fast")
    assert bwd_model.main(["--card", "H200", "--shape", "B1-T256-H2", "--design", "fused"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("H200: copy 4.24 TB/s") and out.count("| fused |") == 4 and "| split |" not in out

"""benchmarks.ab and benchmarks.gate_regimes on the CPU: argument parsing, the no-CUDA exits, the A/B table from fake
child rows, and one tiny gate-regime case through the interpreter."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks import ab, gate_regimes


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
    assert args.backwards == ["default", "triton_bwd"] and args.seeds == 4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gate_regimes.main(["--regimes", "masked"]) == 2
    assert "--no-fla" in capsys.readouterr().err


def test_gate_regimes_render_marks_rows_worse_than_fla():
    e = dict.fromkeys(gate_regimes.TENSORS, 1e-3)
    rows = [dict(regime="unsaturated", layout="heads", dtype="bf16", impl="default", served="sm90_bwd", errors=e,
                 worst_vs_fla=0.9),
            dict(regime="unsaturated", layout="heads", dtype="bf16", impl="triton_bwd", served="triton", errors=e,
                 worst_vs_fla=1.2),
            dict(regime="unsaturated", layout="heads", dtype="bf16", impl="fla", served="", errors=e,
                 worst_vs_fla=None)]
    lines = gate_regimes.render(rows)
    assert lines[2].startswith("| unsaturated | heads | bf16 | default (sm90_bwd) | 1.00e-03 |")
    assert lines[2].endswith("| 0.900 |") and lines[4].endswith("| - |")
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
    assert (tmp_path / "gate_regimes.md").read_text().startswith("device: CPU interpreter")

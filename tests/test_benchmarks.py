"""The benchmark harness on CPU: the bytes/FLOPs model, suites, CLI parsing, the no-CUDA exit, the check-then-time
flow with stand-in implementations, gpu_check's checks, and report rendering from a small JSONL file."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import cases, checks, cli, decode, decode_check, gpu_check, model, provenance, report, run
from benchmarks.suites import (
    FLAG_SETS,
    SUITES,
    Shape,
    parse_shape,
    random_seqlens,
    resolve_flags,
    resolve_suites,
    select_shapes,
    skewed_seqlens,
    uniform_seqlens,
)
from reference.kda import kda_recurrent
from tests.utils import NoBackward

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


# ---------------------------------------------------------------- model

@pytest.mark.parametrize("K, V, BT, expected", [(128, 128, 64, 98304 + 81920), (128, 128, 16, 98304 + 20480),
                                                (64, 32, 64, 12288 + 2 * 64 * (192 + 64))],
                         ids=["K128-V128-BT64", "K128-V128-BT16", "K64-V32-BT64"])
def test_forward_flops_per_token_head(K, V, BT, expected):
    assert model.forward_flops_per_token_head(K, V, BT) == expected


def test_cost_forward_matches_the_perf_notes():
    shape = Shape(B=2, T=8192, H=32, HV=32)
    c = model.cost(shape, "fwd")
    token_heads = 2 * 8192 * 32
    assert c.bytes == token_heads * (4 * 128 * 2 + 2 + 128 * 2)  # q, k, v, g + beta + o, bf16: ~1.3 KB
    assert c.flops == token_heads * 180224
    assert 0.22 < c.bytes / 3.0e12 * 1e3 < 0.23  # PERF_NOTES: ~0.23 ms of bytes at 3.0 TB/s
    assert 0.13 < c.flops / 680e12 * 1e3 < 0.15  # ~0.14 ms of matrix work at 680 TFLOP/s


def test_cost_gva_states_fp32_and_fwdbwd():
    gva = Shape(B=1, T=100, H=2, HV=8, K=16, V=32, dtype="fp32")
    ins = 100 * (2 * 2 * 16 + 8 * 32 + 8 * 16 + 8) * 4
    out = 100 * 8 * 32 * 4
    state = 1 * 8 * 16 * 32 * 4
    assert model.cost(gva, "fwd") == (ins + out, 100 * 8 * model.forward_flops_per_token_head(16, 32))
    with_states = model.cost(gva, "fwd", initial_state=True, final_state=True)
    assert with_states.bytes == ins + out + 2 * state
    fb = model.cost(gva, "fwdbwd", initial_state=True, final_state=True)
    assert fb.bytes == (ins + out + 2 * state) + 2 * ins + out + 2 * state
    assert fb.flops == 3 * with_states.flops
    varlen = Shape(B=1, T=100, H=2, HV=8, K=16, V=32, seqlens=(30, 70), dtype="fp32")
    assert model.cost(varlen, "fwd", final_state=True).bytes == ins + out + 2 * state


def test_cost_rejects_bad_mode_and_dtype():
    with pytest.raises(ValueError, match="mode"):
        model.cost(Shape(B=1, T=8, H=1, HV=1), "bwd")

    class Odd:
        B, T, H, HV, K, V, n_seqs, dtype = 1, 8, 1, 1, 8, 8, 1, "fp8"

    with pytest.raises(ValueError, match="dtype"):
        model.cost(Odd(), "fwd")


def test_roofline_and_speedup():
    r = model.roofline(model.Cost(bytes=3 * 10**9, flops=680 * 10**9), 2.0, copy_tbps=3.0, matmul_tflops=680.0)
    assert r.tbps == pytest.approx(1.5) and r.tflops == pytest.approx(340.0)
    assert r.pct_bw == pytest.approx(50.0) and r.pct_mma == pytest.approx(50.0)
    assert r.floor_ms == pytest.approx(1.0) and r.pct_of_floor == pytest.approx(50.0)
    bare = model.roofline(model.Cost(10**9, 10**12), 1.0)
    assert bare.tbps == pytest.approx(1.0) and bare.tflops == pytest.approx(1000.0)
    assert (bare.pct_bw, bare.pct_mma, bare.floor_ms, bare.pct_of_floor) == (None, None, None, None)
    with pytest.raises(ValueError, match="ms"):
        model.roofline(model.Cost(1, 1), 0.0)
    assert model.speedup(3.0, 1.5) == pytest.approx(2.0)
    assert model.speedup(None, 1.0) is None and model.speedup(1.0, None) is None


# ---------------------------------------------------------------- suites

def test_suites_hold_the_listed_shapes():
    def dims(shape):
        return (shape.B, shape.T, shape.H, shape.HV, shape.K, shape.V, shape.dtype)

    assert [dims(s) for s in SUITES["standard"]] == [
        (1, 8192, 16, 16, 128, 128, "bf16"), (2, 8192, 32, 32, 128, 128, "bf16"),
        (2, 8192, 64, 64, 128, 128, "bf16"), (8, 2048, 32, 32, 128, 128, "bf16")]
    assert [s.T for s in SUITES["kimi"]] == [4096, 8192, 16384, 32768]
    assert all((s.B, s.H, s.HV) == (1, 32, 32) for s in SUITES["kimi"])
    assert [(s.B, s.T, s.H) for s in SUITES["long"]] == [(1, 32768, 8), (1, 65536, 8), (1, 131072, 8)]
    assert [(s.H, s.HV, s.B, s.T) for s in SUITES["gva"]] == [(16, 32, 2, 8192), (8, 64, 2, 8192)]
    assert [(s.K, s.V) for s in SUITES["headdim"]] == [(64, 64), (256, 256)]
    assert [dims(s) for s in SUITES["fp32"]] == [(1, 8192, 16, 16, 128, 128, "fp32")]
    assert [(s.B, s.T, s.H, s.HV, s.seqlens) for s in SUITES["prefill"]] == [
        (1, 8192, 96, 96, None), (1, 8192, 96, 96, (1300, 547, 2048, 963, 271, 3063)),
        (1, 8192, 16, 32, (1300, 547, 2048, 963, 271, 3063))]
    rand, uniform, skewed = SUITES["varlen"]
    assert all(s.varlen and s.T == 16384 and s.H == 32 and sum(s.seqlens) == 16384 for s in SUITES["varlen"])
    assert len(rand.seqlens) == 20 and min(rand.seqlens) > 0 and rand.seqlens == random_seqlens(20, 16384, 0)
    assert uniform.seqlens == (1638,) * 9 + (1642,)
    assert skewed.seqlens[0] == 8192 and set(skewed.seqlens[1:]) == {128}
    assert [dims(s) for s in SUITES["decode"]] == [(b, 1, 32, 32, 128, 128, "bf16") for b in (1, 64, 256)]
    assert len({(s.label, s.dtype) for shapes in SUITES.values() for s in shapes}) == sum(map(len, SUITES.values()))


def test_seqlen_helpers():
    assert random_seqlens(5, 100, seed=3) == random_seqlens(5, 100, seed=3)
    assert random_seqlens(5, 100, seed=3) != random_seqlens(5, 100, seed=4)
    assert sum(random_seqlens(7, 50, seed=1)) == 50
    assert uniform_seqlens(3, 10) == (3, 3, 4)
    assert skewed_seqlens(20, long=10, short=5) == (10, 5, 5)
    with pytest.raises(ValueError, match="n must be"):
        random_seqlens(0, 10)
    with pytest.raises(ValueError, match="multiple of short"):
        skewed_seqlens(20, long=10, short=3)


@pytest.mark.parametrize("kwargs, match", [
    ({"B": 1, "T": 8, "H": 3, "HV": 4}, "HV must be a multiple of H"),
    ({"B": 0, "T": 8, "H": 1, "HV": 1}, "Shape.B"),
    ({"B": 1, "T": 8, "H": 1, "HV": 1, "dtype": "fp8"}, "Shape.dtype"),
    ({"B": 2, "T": 8, "H": 1, "HV": 1, "seqlens": (4, 4)}, "B must be 1"),
    ({"B": 1, "T": 8, "H": 1, "HV": 1, "seqlens": (4, 3)}, "sum to T=8"),
], ids=["HV-not-multiple", "B0", "dtype-fp8", "varlen-B2", "seqlens-sum"])
def test_shape_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Shape(**kwargs)


def test_shape_labels_and_parse_shape():
    shape = Shape(B=2, T=130, H=2, HV=4, K=64, V=32, dtype="fp32")
    assert shape.label == "B2-T130-H2-HV4-K64-V32"
    assert parse_shape(shape.label + "-fp32") == shape
    assert parse_shape("B2-T8192-H32") == Shape(B=2, T=8192, H=32, HV=32)
    varlen = Shape(B=1, T=10, H=1, HV=1, seqlens=(3, 7), tag="x")
    assert varlen.label.startswith("varlen-x-B1-T10") and varlen.n_seqs == 2 and varlen.tokens == 10
    for bad in ("B2-T8192", "B2-T8192-H32-H16", "B2-T8192-H32-Q4", "B2-T8192-H32-HV48"):
        with pytest.raises(ValueError):
            parse_shape(bad)


def test_resolve_and_select():
    assert list(resolve_suites(["all"])) == list(SUITES)
    assert list(resolve_suites(["kimi", "standard", "kimi"])) == ["kimi", "standard"]
    with pytest.raises(ValueError, match="unknown suite"):
        resolve_suites(["nope"])
    assert [f.name for f in resolve_flags(["pregated", "kimi"])] == ["pregated", "kimi"]
    with pytest.raises(ValueError, match="unknown flag"):
        resolve_flags(["fast"])
    kimi = FLAG_SETS["kimi"]
    assert kimi.make_kwargs["use_gate_in_kernel"] and kimi.make_kwargs["lower_bound"] == -5.0
    assert kimi.make_kwargs["use_beta_sigmoid_in_kernel"] and kimi.make_kwargs["use_qk_l2norm_in_kernel"]
    assert kimi.call_kwargs == {"safe_gate": True}
    assert FLAG_SETS["pregated"].make_kwargs == {"gate": "logsigmoid", "use_qk_l2norm_in_kernel": True}
    quick = select_shapes(SUITES["kimi"], quick=True)
    assert [s.T for s in quick] == [4096, 8192]
    for shapes in SUITES.values():
        chosen = select_shapes(shapes, quick=True)
        assert 1 <= len(chosen) <= 2 and len({(s.H, s.HV, s.K, s.V) for s in chosen}) == 1
    assert len(select_shapes(SUITES["standard"], max_shapes=3)) == 3
    picked = select_shapes(SUITES["standard"] + SUITES["long"], labels=("B2-T8192-H64", "T65536"))
    assert [s.label for s in picked] == ["B2-T8192-H64-HV64-K128-V128", "B1-T65536-H8-HV8-K128-V128"]
    with pytest.raises(ValueError, match="max_shapes"):
        select_shapes(SUITES["standard"], max_shapes=0)


# ---------------------------------------------------------------- CLI

def test_run_cli_parsing():
    args = run.build_parser().parse_args(
        ["--suite", "standard,kimi", "--impl", "triton", "--modes", "fwd", "--flags", "kimi,pregated",
         "--out", "x", "--quick", "--max-shapes", "2", "--shapes", "B2-T8192-H64,T65536"])
    assert args.shapes == ("B2-T8192-H64", "T65536")
    assert args.suite == ["standard", "kimi"] and args.impl == ["triton"] and args.modes == ["fwd"]
    assert args.flags == ["kimi", "pregated"] and args.out == Path("x") and args.quick and args.max_shapes == 2
    defaults = run.build_parser().parse_args([])
    assert (defaults.suite, defaults.impl, defaults.modes, defaults.flags) == (
        ["standard"], ["auto", "fla"], ["fwd", "fwdbwd"], ["kimi"])
    assert not defaults.cold_start and defaults.cold_start_child is None and defaults.shapes == ()


@pytest.mark.parametrize("argv", [["--suite", "huge"], ["--impl", "cuda"], ["--modes", "bwd"], ["--flags", ""],
                                  ["--max-shapes", "0"], ["--warmup-ms", "x"]],
                         ids=["suite", "impl", "modes", "flags-empty", "max-shapes-0", "warmup-not-int"])
def test_run_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        run.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "expected" in capsys.readouterr().err


def test_gpu_check_cli_parsing(capsys):
    args = gpu_check.build_parser().parse_args(["--shapes", "B1-T4096-H16", "--no-fla", "--modes", "fwd"])
    assert args.shapes == "B1-T4096-H16" and args.no_fla and args.modes == ["fwd"]
    with pytest.raises(SystemExit) as exc:
        gpu_check.main(["--shapes", "B1-T4096"])
    assert exc.value.code == 2 and "--shapes" in capsys.readouterr().err


@pytest.mark.parametrize("main, prog", [(run.main, "benchmarks.run"), (gpu_check.main, "benchmarks.gpu_check"),
                                        (decode_check.main, "benchmarks.decode_check")],
                         ids=["run", "gpu_check", "decode_check"])
def test_no_cuda_exits_with_code_2(main, prog, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out"
    assert main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert prog in err and "CUDA" in err
    assert not out.exists()


def test_no_cuda_exit_code_of_the_module():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--suite", "standard", "--quick"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "needs a CUDA GPU" in done.stderr


def test_cold_start_runs_a_child_and_records_its_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the child finds no GPU and answers with a tagged error line
    args = run.build_parser().parse_args(["--cold-start", "--impl", "triton", "--suite", "kimi", "--flags", "pregated"])
    writer = cli.JsonlWriter(tmp_path / "cold.jsonl")
    run.run_cold_start(args, {"gpu": "test"}, writer)
    (row,) = report.load_rows([writer.path])
    assert (row["kind"], row["impl"], row["shape"], row["flags"], row["gpu"]) == (
        "cold_start", "triton", SUITES["kimi"][0].label, "pregated", "test")
    assert row["status"] == "error" and "needs a CUDA GPU" in row["reason"] and row["parent_wall_s"] > 0


# ---------------------------------------------------------------- harness helpers

def test_rotation_count():
    l2 = 50 * 10**6
    assert cases.rotation_count(1 * 10**6, l2, 10**12) == 8  # small sets: capped at 8
    assert cases.rotation_count(60 * 10**6, l2, 10**12) == 3  # 3 x L2 / 60 MB -> 3
    assert cases.rotation_count(10**9, l2, 10**12) == 2  # large sets: still two
    assert cases.rotation_count(10**9, l2, 10**9) == 1  # memory budget wins
    assert cases.rotation_count(10**9, l2, 10) == 1


def test_first_sequence_and_small_case():
    fixed = Shape(B=2, T=3000, H=2, HV=4)
    assert checks.first_sequence(fixed, 1024) == (0, 1024)
    varlen = Shape(B=1, T=20, H=1, HV=1, seqlens=(0, 0, 12, 8))
    assert checks.first_sequence(varlen, 1024) == (0, 12)
    assert checks.first_sequence(Shape(B=1, T=20, H=1, HV=1, seqlens=(0, 20)), 5) == (0, 5)
    small = checks.small_case(Shape(B=1, T=5000, H=4, HV=8, K=64, V=32, seqlens=(5000,), dtype="fp16"))
    assert (small.B, small.T, small.H, small.HV, small.K, small.V, small.seqlens, small.dtype) == (
        1, checks.GRAD_CHECK_TOKENS, 4, 8, 64, 32, (checks.GRAD_CHECK_TOKENS,), "fp16")
    assert checks.small_case(fixed).seqlens is None


def test_fla_prewarm_shares_every_autotuners_configs(monkeypatch):
    """Worker i of n keeps configurations i, i + n, ... of each autotuner, once per autotuner (also when two modules
    import it), and at least one."""
    import types

    import triton
    import triton.language as tl

    from benchmarks import fla_prewarm

    def tuned(n):
        @triton.autotune(configs=[triton.Config({"BK": 16 * (i + 1)}) for i in range(n)], key=["N"])
        @triton.jit
        def kernel(x, N, BK: tl.constexpr):
            pass

        return kernel

    a, b = tuned(5), tuned(2)
    mod = types.ModuleType("fla.ops.fake")
    mod.a, mod.b, mod.n = a, b, 3
    other = types.ModuleType("fla.ops.fake_importer")
    other.a = a
    assert fla_prewarm.share_configs(1, 3, [mod, other]) == 2
    assert [c.kwargs["BK"] for c in a.configs] == [32, 80]
    assert [c.kwargs["BK"] for c in b.configs] == [32]
    assert fla_prewarm.share_configs(2, 3, [mod]) == 2  # b keeps its one left
    assert [c.kwargs["BK"] for c in b.configs] == [32]
    # by default the modules named fla.* (a stand-in for sys.modules: the real fla's autotuners stay as they are)
    c = tuned(4)
    unrelated = types.ModuleType("not_fla")
    unrelated.c = c
    fake_sys = types.SimpleNamespace(modules={"fla.ops.fake_importer": other, "fla.absent": None, "not_fla": unrelated})
    monkeypatch.setattr(fla_prewarm, "sys", fake_sys)
    assert fla_prewarm.share_configs(0, 2) == 1
    assert [x.kwargs["BK"] for x in a.configs] == [32] and len(c.configs) == 4


def test_fla_prewarm_cli(capsys):
    from benchmarks import fla_prewarm

    args = fla_prewarm.build_parser().parse_args(["--shapes", "K256", "--flags", "kimi,pregated", "--workers", "4"])
    assert (args.suite, args.shapes, args.flags, args.workers) == (None, ("K256",), ["kimi", "pregated"], 4)
    assert fla_prewarm.build_parser().parse_args(["--gate-regimes", "bf16,fp16"]).gate_regimes == ["bf16", "fp16"]
    with pytest.raises(SystemExit, match="no shape"):
        fla_prewarm.main(["--shapes", "K512"])


def test_fla_prewarm_workers_get_the_gate_regimes(monkeypatch, capsys):
    from benchmarks import fla_prewarm

    cmds = []

    class Done:
        returncode = 0

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(fla_prewarm.subprocess, "Popen", lambda cmd: cmds.append(cmd) or Done())
    assert fla_prewarm.main(["--gate-regimes", "fp16", "--workers", "2"]) == 0
    assert all("--suite" not in c and c[c.index("--gate-regimes") + 1] == "fp16" for c in cmds) and len(cmds) == 2
    assert "and the gate regimes in fp16" in capsys.readouterr().out


def test_fla_prewarm_stops_its_workers_at_the_budget(monkeypatch, capsys):
    import subprocess
    import time

    from benchmarks import fla_prewarm

    popen = subprocess.Popen
    started = []

    def sleeper(cmd):
        assert cmd[-2:] == ["--worker", str(len(started))]
        started.append(popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return started[-1]

    monkeypatch.setattr(fla_prewarm.subprocess, "Popen", sleeper)
    t0 = time.perf_counter()
    assert fla_prewarm.main(["--shapes", "K256", "--workers", "2", "--budget-s", "1"]) == 1
    assert time.perf_counter() - t0 < 30
    assert all(p.poll() is not None for p in started) and len(started) == 2
    assert "(2 stopped)" in capsys.readouterr().out


def test_jsonl_writer_appends(tmp_path):
    path = cli.output_path(tmp_path / "o", "bench-standard")
    assert path.name.startswith("bench-standard-") and path.suffix == ".jsonl"
    writer = cli.JsonlWriter(path)
    writer.write([{"a": 1}])
    writer.write([{"a": 2}, {"a": float("nan")}])
    rows = report.load_rows([path])
    assert [r["a"] for r in rows[:2]] == [1, 2] and rows[2]["a"] != rows[2]["a"]


# ---------------------------------------------------------------- check-then-time with stand-in implementations

def oracle_impl(**kwargs):
    """A correct stand-in: the fp64 oracle, cast to the input dtype (differentiable)."""
    o, ht = kda_recurrent(**kwargs)
    return o.to(kwargs["q"].dtype), ht


def zeros_impl(**kwargs):
    return torch.zeros_like(kwargs["v"]), None


def raising_impl(**kwargs):
    raise RuntimeError("kernel launch failed")


def forward_only_impl(**kwargs):
    o, ht = oracle_impl(**kwargs)
    return NoBackward.apply(o), ht


def test_bench_case_checks_then_times(capsys):
    times = itertools.cycle([(1.0, 0.9, 1.1), (2.0, 1.8, 2.2), (2.0, 1.9, 2.1), (6.0, 5.5, 6.5)])

    def timer(fn):
        fn()
        fn()  # two calls: the rotation moves to the next input set
        return next(times)

    shape = Shape(B=2, T=24, H=1, HV=2, K=8, V=8, dtype="fp32")
    context = {"gpu": "test", "copy_tbps": 3.0, "matmul_tflops": 680.0}
    impls = {"triton": oracle_impl, "fla": oracle_impl, "zeros": zeros_impl, "raising": raising_impl,
             "fwdonly": forward_only_impl, "absent": "absent not importable: ImportError: no module"}
    rows = cases.bench_case("t", shape, FLAG_SETS["kimi"], impls, ["fwd", "fwdbwd"], device=CPU, timer=timer,
                          context=context)
    by = {(r["impl"], r["mode"]): r for r in rows}
    assert len(rows) == 12
    for mode, speed in (("fwd", 2.0), ("fwdbwd", 3.0)):
        ours = by["triton", mode]
        assert ours["status"] == "ok" and ours["speedup_vs_fla"] == pytest.approx(speed)
        assert by["fla", mode]["speedup_vs_fla"] == pytest.approx(1.0)
        assert ours["rel_rmse"] < 1e-6 and ours["gpu"] == "test" and ours["n_sets"] == 2
        assert ours["pct_bw"] is not None and ours["tbps"] == pytest.approx(ours["bytes"] / ours["median_ms"] / 1e9)
        assert by["zeros", mode]["status"] == "refused" and "forward check" in by["zeros", mode]["reason"]
        assert by["raising", mode]["status"] == "error" and "kernel launch failed" in by["raising", mode]["reason"]
        assert by["absent", mode]["status"] == "skipped"
    assert by["triton", "fwdbwd"]["grad_rel_rmse"] < 1e-6
    assert by["triton", "fwdbwd"]["grad_tol"] == checks.BWD_TOL["fp32"]
    assert by["fwdonly", "fwd"]["status"] == "ok"
    assert by["fwdonly", "fwdbwd"]["status"] == "unsupported"
    assert by["fwdonly", "fwdbwd"]["reason"] == "NotImplementedError: no backward here"
    assert all(cases.describe(r) for r in rows)
    assert "[warm-up] triton" in capsys.readouterr().out


def test_bench_case_refuses_wrong_gradients():
    class WrongGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return 2 * grad

    def impl(**kwargs):
        o, ht = oracle_impl(**kwargs)
        return WrongGrad.apply(o), ht

    shape = Shape(B=1, T=20, H=1, HV=1, K=8, V=8, seqlens=(5, 15), dtype="fp32")
    rows = cases.bench_case("t", shape, FLAG_SETS["pregated"], {"triton": impl}, ["fwdbwd"], device=CPU,
                          timer=lambda fn: (1.0, 1.0, 1.0), context={})
    assert rows[0]["status"] == "refused" and "gradient check" in rows[0]["reason"]
    assert rows[0]["grad_rel_rmse"] == pytest.approx(1.0)


# ---------------------------------------------------------------- gpu_check's checks

TINY = gpu_check.CheckCase("tiny-varlen-kimi", 1, 40, 1, 2, 8, 8, seqlens=(17, 0, 23),
                           make={**gpu_check.KIMI, "initial_state": True, "output_final_state": True},
                           call={"safe_gate": True})


def test_check_accuracy_passes_the_oracle_and_catches_errors():
    rows = gpu_check.check_accuracy(oracle_impl, TINY, "fp32", CPU, 0)
    assert [(r["check"], r["status"]) for r in rows] == [("fwd", "pass"), ("bwd", "pass")]
    assert set(rows[1]["rel_rmse"]) == {"dq", "dk", "dv", "dg", "dbeta", "dinitial_state", "dA_log", "ddt_bias"}

    def off_state(**kwargs):
        o, ht = oracle_impl(**kwargs)
        return o, ht * 1.1

    rows = gpu_check.check_accuracy(off_state, TINY, "fp32", CPU, 0)
    assert rows[0]["status"] == "fail" and rows[0]["worst"] == "final_state"
    rows = gpu_check.check_accuracy(forward_only_impl, TINY, "fp32", CPU, 0)
    assert [r["status"] for r in rows] == ["pass", "unsupported"]
    rows = gpu_check.check_accuracy(raising_impl, TINY, "fp32", CPU, 0)
    assert [r["status"] for r in rows] == ["error", "error"]


def test_check_repeat_and_causality():
    assert gpu_check.check_repeat(oracle_impl, TINY, "fp32", CPU, 0)["status"] == "pass"
    calls = itertools.count()

    def noisy(**kwargs):
        o, ht = oracle_impl(**kwargs)
        return o + next(calls) * 1e-3, ht

    assert gpu_check.check_repeat(noisy, TINY, "fp32", CPU, 0)["status"] == "fail"
    case = gpu_check.CheckCase("causal-tiny", 1, 70, 1, 1, 8, 8, make=dict(gpu_check.KIMI), call={"safe_gate": True})
    assert gpu_check.check_causality(oracle_impl, case, "fp32", CPU, 0)["status"] == "pass"

    def leaky(**kwargs):  # every output sees the last token's value
        o, ht = oracle_impl(**kwargs)
        return o + kwargs["v"][:, -1:].to(o.dtype), ht

    row = gpu_check.check_causality(leaky, case, "fp32", CPU, 0)
    assert row["status"] == "fail" and "t in [0, 15, 16, 63, 64]" in row["reason"]


def test_gpu_check_summary_and_markdown():
    checks = [gpu_check.check_row("fwd", "a", "bf16", "pass", rel_rmse={"o": 1e-3}, worst="o", tol=1e-2),
              gpu_check.check_row("bwd", "a", "bf16", "unsupported", reason="NotImplementedError: x"),
              gpu_check.check_row("causality", "c", "fp32", "fail", reason="outputs <= t changed")]
    bench = [{"impl": "triton", "shape": "B1-T8-H1-HV1-K8-V8", "flags": "kimi", "mode": "fwd", "status": "ok",
              "median_ms": 1.0, "speedup_vs_fla": 2.0, "tbps": 1.0, "pct_of_floor": 10.0, "rel_rmse": 1e-3,
              "warmup_fwd_s": 3.0}]
    text = gpu_check.summary({"gpu": "H100"}, checks, bench, [Path("x.md")])
    assert "fwd 1 pass" in text and "bwd 1 unsupported" in text and "FAILED causality" in text
    assert "| triton | B1-T8-H1-HV1-K8-V8 | kimi | fwd | 1.000 | 2.00 |" in text
    md = gpu_check.checks_markdown(checks)
    assert "| fwd | a | bf16 | pass | o | 1.0e-03 | 1e-02 | o=1.0e-03 |" in md


# ---------------------------------------------------------------- report

def fake_rows():
    base = {"kind": "bench", "suite": "kimi", "flags": "kimi", "dtype": "bf16", "gpu": "NVIDIA H100", "B": 1,
            "H": 32, "HV": 32, "K": 128, "V": 128, "varlen": False, "status": "ok", "time_utc": "2026-01-01T00:00:00Z"}
    rows = []
    for t, ours, fla in ((4096, 0.5, 1.0), (8192, 0.9, 2.0)):
        for impl, ms in (("triton", ours), ("fla", fla)):
            rows.append({**base, "impl": impl, "mode": "fwd", "T": t, "shape": f"B1-T{t}-H32-HV32-K128-V128",
                         "median_ms": ms, "p20_ms": ms * 0.9, "p80_ms": ms * 1.1, "tbps": 1.0, "rel_rmse": 2e-3})
    rows.append({**base, "impl": "triton", "mode": "fwdbwd", "T": 4096, "shape": "B1-T4096-H32-HV32-K128-V128",
                 "status": "unsupported", "reason": "NotImplementedError: backward | later", "median_ms": None})
    rows.append({"kind": "cold_start", "impl": "fla", "shape": "B1-T4096-H32-HV32-K128-V128", "flags": "kimi",
                 "dtype": "bf16", "status": "ok", "cold_start_s": 120.5, "first_call_s": 100.0, "gpu": "NVIDIA H100"})
    rows.append({"kind": "check", "check": "fwd", "status": "pass"})
    return rows


def test_attach_speedups_fills_missing_only():
    rows = report.attach_speedups(fake_rows())
    ours = [r for r in rows if r.get("impl") == "triton" and r.get("status") == "ok"]
    assert [r["speedup_vs_fla"] for r in ours] == [pytest.approx(2.0), pytest.approx(2.0 / 0.9)]
    kept = report.attach_speedups([{**ours[0], "speedup_vs_fla": 7.0}, *rows])
    assert kept[0]["speedup_vs_fla"] == 7.0
    other_gpu = report.attach_speedups([{**ours[0], "gpu": "H200", "speedup_vs_fla": None}, *rows[1:2]])
    assert other_gpu[0]["speedup_vs_fla"] is None


def test_markdown_table_and_cells():
    table = report.markdown_table(["a", "b"], [["1", "x"]], numeric={0})
    assert table == "| a | b |\n| ---: | --- |\n| 1 | x |"
    with pytest.raises(ValueError, match="cells"):
        report.markdown_table(["a"], [["1", "2"]])
    assert report.cell(None) == "-" and report.cell(float("nan"), ".2f") == "-"
    assert report.cell(1.23456, ".2f") == "1.23" and report.cell("a|b\nc") == "a\\|b c"
    assert report.cell(True, ".2f") == "True"


def test_render_markdown_from_jsonl(tmp_path):
    path = tmp_path / "rows.jsonl"
    cli.JsonlWriter(path).write(fake_rows())
    text = report.render_markdown(report.load_rows([path]), ["note"])
    assert "4 timed rows, 1 not timed, 1 cold starts, 1 other rows" in text
    assert "| kimi | B1-T8192-H32-HV32-K128-V128 | kimi | bf16 | fwd | triton | 0.900 | 2.000 | 2.22 |" in text
    assert ("- triton fwd kimi bf16: geomean x2.108 over 2 shapes, lowest x2.000 (kimi B1-T4096-H32-HV32-K128-V128)"
            in text)
    assert "NotImplementedError: backward \\| later" in text
    assert "| fla | B1-T4096-H32-HV32-K128-V128 | kimi | bf16 | ok | 120.5 | 100.0 |" in text
    assert "| NVIDIA H100 |" in text and "## Plots\n\nnote" in text


def test_report_cli_and_plots_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in fake_rows()) + "\n\n")
    out = tmp_path / "docs"
    assert report.main([str(path), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "Plots skipped: matplotlib is not importable" in text
    assert not list(out.glob("*.png"))
    assert report.main([str(path), "--out", str(out), "--name", "H100"]) == 0
    assert (out / "H100.md").read_text() == text
    assert report.main([str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert report.main([str(empty), "--out", str(out)]) == 2
    assert "no rows" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        report.load_rows([bad])


def test_report_plots_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    notes = report.write_plots(fake_rows(), tmp_path)
    assert notes == ["![speedup against fla](speedup.png)", "![time against T](time_vs_T.png)"]
    assert (tmp_path / "speedup.png").stat().st_size > 1000 and (tmp_path / "time_vs_T.png").stat().st_size > 1000
    assert report.write_plots(fake_rows(), tmp_path, "H100_")[0] == "![speedup against fla](H100_speedup.png)"
    assert (tmp_path / "H100_speedup.png").is_file()


def test_git_sha_override(monkeypatch):
    monkeypatch.setenv("KDA_GIT_SHA", "abc123")
    assert provenance.git_sha() == "abc123"
    monkeypatch.delenv("KDA_GIT_SHA")
    assert provenance.git_sha() != "abc123"


def test_time_vs_t_groups():
    timed = [r for r in fake_rows() if r.get("kind") == "bench" and r["status"] == "ok"]
    groups = report.time_vs_t_groups(timed)
    assert sorted(groups.values()) == [[(4096, 0.5), (8192, 0.9)], [(4096, 1.0), (8192, 2.0)]]
    assert report.time_vs_t_groups(timed[:1]) == {}


def test_tune_cache_round_trip(tmp_path, monkeypatch):
    from benchmarks import tune_cache

    cache, saved = tmp_path / "triton", tmp_path / "saved"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert tune_cache.save(saved) == 0 and tune_cache.restore(saved) == 0
    (cache / "abc").mkdir(parents=True)
    (cache / "abc" / "kern.autotune.json").write_text('{"key": 1}')
    (cache / "abc" / "kern.cubin").write_bytes(b"\0" * 8)
    assert tune_cache.save(saved) == 1
    assert sorted(p.name for p in saved.rglob("*")) == ["abc", "kern.autotune.json"]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "fresh"))
    assert tune_cache.restore(saved) == 1
    assert (tmp_path / "fresh" / "abc" / "kern.autotune.json").read_text() == '{"key": 1}'


# ---------------------------------------------------------------- decode suite

def test_decode_floor_is_the_state_traffic():
    shape = Shape(B=256, T=1, H=32, HV=32)
    assert decode.state_floor_ms(shape, 3.0) == pytest.approx(2 * 256 * 32 * 128 * 128 * 4 / 3.0e12 * 1e3)
    assert 0.35 < decode.state_floor_ms(shape, 3.0) < 0.36 and decode.state_floor_ms(shape, None) is None


def test_decode_bench_checks_then_times(monkeypatch):
    """Ours through the interpreter, a slower stand-in for fla, a wrong step: checked against the oracle (the wrong
    one refused), timed, speedups and floor ratios attached; the CUDA graph cannot be captured on CPU (a reason)."""
    def zeros_step(inputs, pool, idx):
        return torch.zeros_like(inputs["v"]), pool

    monkeypatch.setattr(decode, "STEPS", {"triton": decode.ours, "fla": decode.ours, "zeros": zeros_step})
    times = {"triton": (1.0, 0.9, 1.1), "fla": (1.5, 1.4, 1.6)}
    calls = []

    def timer(fn):
        fn()
        calls.append(fn)
        return times["triton" if len(calls) == 1 else "fla"]

    shape = Shape(B=2, T=1, H=1, HV=2, K=16, V=16, dtype="fp32")
    rows = decode.bench_shape(shape, FLAG_SETS["kimi"], ["triton", "fla", "zeros", "sm90"], timer,
                              {"gpu": "test", "copy_tbps": 2.0}, slots=5, device=CPU)
    by = {r["impl"]: r for r in rows}
    ours = by["triton"]
    assert ours["status"] == "ok" and ours["rel_rmse"] < 1e-6 and ours["rel_rmse_state"] < 1e-6
    assert ours["untouched_equal"] and ours["speedup_vs_fla"] == pytest.approx(1.5)
    assert ours["floor_ms"] == pytest.approx(2 * 2 * 2 * 16 * 16 * 4 / 2e12 * 1e3)
    assert ours["floor_ratio"] == pytest.approx(1.0 / ours["floor_ms"])
    assert ours["graph_ms"] is None and "CUDA graph capture failed" in ours["reason"]
    assert by["zeros"]["status"] == "refused" and by["sm90"]["status"] == "skipped"
    assert all(decode.describe(r) for r in rows)
    text = decode.markdown(rows)
    assert "| triton | 2 |" in text and "1000.0" in text
    lines = decode_check.targets(rows)
    assert lines[0] == "- B2 fla / ours (do_bench) 1.50 >= 1.2: met"
    assert lines[1].startswith("- B2 fla / ours (graph) -") and lines[1].endswith("NOT met")
    assert lines[2].startswith("- B2 ours / floor (do_bench)")
    host = [{"kind": "host", "B": 2, **{f"{n}_us": 10.0 * (i + 1) for i, n in enumerate(decode.STEPS)}}]
    sweep = [{"kind": "sweep", "B": 2, "BV": bv, "num_warps": 4, "table": bv == 16, "median_ms": ms,
              "graph_ms": None if ms is None else ms / 2, "reason": None if ms else "no compile"}
             for bv, ms in ((16, 2.0), (32, 1.0), (64, None))]
    checks = [{"kind": "check", "name": "fast-path", "passed": False, "detail": "d"}]
    text = decode_check.render({"gpu": "test"}, checks, host, rows, sweep)
    assert "## Host time per call" in text and "| 2 | 10.0 | 20.0 | 30.0 |" in text and "no compile" in text
    assert decode_check.summary(checks, host, rows, sweep).splitlines() == [
        "Summary", "- checks: FAILED fast-path", "- host us/call B2: triton 10.0, fla 20.0, zeros 30.0",
        "- B2 triton/fla/zeros: do_bench 1000.0/1500.0/- us, graph -/-/- us; fla/ours x1.50 (graph x-), ours/floor "
        f"x{ours['floor_ratio']:.2f}",
        "- sweep B2 (graph): best BV32 w4 500.0 us; table BV16 w4 1000.0 us",
        "- sweep B2 (do_bench): best BV32 w4 1000.0 us; table BV16 w4 2000.0 us"]


def test_decode_host_time_and_the_step_without_plans(monkeypatch):
    """host_us times rounds of back-to-back calls after a warm-up call; ours_plain runs ours with the plans kept per
    call signature off and turns them back on."""
    from triton_kda import decode as kda_decode

    calls = []
    assert decode.host_us(lambda: calls.append(1), CPU) > 0
    assert len(calls) == 1 + decode.HOST_CALLS * decode.HOST_ROUNDS
    seen = []
    monkeypatch.setattr(decode, "ours", lambda *args: seen.append(kda_decode.FAST_PATH))
    decode.ours_plain({}, None, None)
    assert seen == [False] and kda_decode.FAST_PATH is True

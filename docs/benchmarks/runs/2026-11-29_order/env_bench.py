"""The no-grad forward with the default dispatch under several environment settings, Kimi flags, bf16, seed 0, with
an initial and a final state: each setting's backend, its output and final state against the first setting's (bit for
bit, else the largest difference), and do_bench medians, the settings timed in turn ``--repeat`` times.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_order/env_bench.py --shapes varlen-skewed,B1-T32768-H8
        --envs "TRITON_KDA_SM90_LONGEST_FIRST=0;TRITON_KDA_SM90_LONGEST_FIRST=1" [--repeat 3]

A shape is a suite shape's id or its prefix (``varlen-skewed``: the varlen suite's skewed batch) or a fixed shape
``benchmarks.suites.parse_shape`` reads; a setting is ``NAME=VALUE[,NAME=VALUE]``: every variable that any setting
names is unset first.
"""
import argparse
import os

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, SUITES, parse_shape
from triton_kda import backend_report, chunk_kda


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def find_shape(text: str):
    for shapes in SUITES.values():
        for s in shapes:
            if s.label.startswith(text):
                return s
    return parse_shape(text)


def names(settings: list[str]) -> set[str]:
    return {item.partition("=")[0] for s in settings for item in filter(None, s.split(","))}


def apply(setting: str, settings: list[str]) -> None:
    """The environment of one setting: every variable any setting names unset, then this setting's set."""
    for name in names(settings):
        os.environ.pop(name, None)
    for item in filter(None, setting.split(",")):
        name, _, value = item.partition("=")
        if value:
            os.environ[name] = value


def shape_row(text: str, settings: list[str], repeat: int) -> str:
    shape = find_shape(text)
    kw = make_case_inputs(shape, FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0, requires_grad=False)
    HV, D = kw["v"].shape[2], kw["v"].shape[3]
    kw["initial_state"] = torch.randn(shape.n_seqs, HV, D, D, device="cuda") * 0.1
    kw["output_final_state"] = True
    notes, times, ref = {}, {s: [] for s in settings}, None
    with torch.no_grad():
        for s in settings:
            apply(s, settings)
            o, ht = chunk_kda(**kw)
            if ref is None:
                same = ""
            elif torch.equal(o, ref[0]) and torch.equal(ht, ref[1]):
                same = " bit-identical"
            else:
                same = (f" max|do| {(o.float() - ref[0].float()).abs().max().item():.2e}"
                        f" max|dht| {(ht - ref[1]).abs().max().item():.2e}")
            ref = ref or (o, ht)
            notes[s] = f"{same} ({backend_report()[-1].name})"
        for _ in range(repeat):
            for s in settings:
                apply(s, settings)
                times[s].append(bench(lambda: chunk_kda(**kw)))
    return f"{shape.label}:\n" + "\n".join(
        f"  [{s}] {' / '.join(f'{t:.1f}' for t in times[s])} us{notes[s]}" for s in settings)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--envs", required=True, help="settings separated by ';'")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    settings = args.envs.split(";")
    for text in args.shapes.split(","):
        print(shape_row(text, settings, args.repeat), flush=True)
        apply("", settings)


if __name__ == "__main__":
    main()

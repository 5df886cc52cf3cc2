"""Several copies of the package side by side in one process (one GPU call): fwd+bwd time, each kernel's CUDA time,
every output's and gradient's error against the fp64 oracle (fla's on the same inputs beside them) and bit-identical
reruns.

    python3 docs/benchmarks/scripts/bwd_variants.py --pkg base=.var/base:triton_kda_base --pkg new=.:triton_kda
        [--shapes B2-T8192-H32,...] [--dtypes bf16] [--rounds 3] [--profile B2-T8192-H32[:fp16],...] [--errors]
        [--sweep "state.state_config@B2-T8192-H16-K256:bf16=BV=16,num_warps=8;BV=64"] [--memory]

`--sweep MODULE.FUNC@SHAPE[:dtype]=FIELD=VALUE,...;...` (repeatable) times fwd+bwd of the last --pkg with the launch
configuration function FUNC of its module MODULE (e.g. `intra.intra_bwd_config`, `state.state_config`) returning
the table's configuration with the given fields replaced, one configuration per `;`-separated entry, the table's own
first.

`--memory` adds each package's peak memory of one fwd+bwd step (above the inputs, `benchmarks.timing.peak_memory_gib`)
on every shape and dtype timed.

A shape is B-T-H with an optional head dim K (K = V, default 128): `B2-T8192-H16-K256`.

`--pkg NAME=DIR:MODULE` imports MODULE (a copy of `triton_kda`) from DIR; a copy of commit C is made with
`git archive C triton_kda | tar -x -C .var/x` and its package renamed (directory and imports). Timing, profile and
input construction are those of `bwd_before_after.py` (Kimi Linear's flags); `--errors` pools the relative RMSE
over `tests/test_vs_fla.py`'s seeds on its two cases (Kimi flags bf16 B1 T512 H4, fla's masked fp16 varlen case).
Prints markdown tables; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bwd_before_after import inputs, kernel_times, step  # noqa: E402

from benchmarks.timing import peak_memory_gib  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load(spec: str):
    """NAME=DIR:MODULE -> (NAME, the module's chunk_kda)."""
    name, where = spec.split("=", 1)
    path, module = where.split(":", 1)
    sys.path.insert(0, os.path.abspath(path))
    return name, importlib.import_module(module).chunk_kda


def shape_of(text: str) -> tuple[int, int, int, int]:
    """"B2-T8192-H32" or "B2-T8192-H16-K256" -> (B, T, H, K); K = V, 128 unless given."""
    dims = {x[0]: int(x[1:]) for x in text.split("-")}
    return dims["B"], dims["T"], dims["H"], dims.get("K", 128)


def case(shape: str, dname: str) -> tuple[dict, torch.Tensor]:
    """The inputs (leaves requiring grad) and the upstream gradient of `shape` ("B2-T8192-H32[-K256]") in `dname`."""
    B, T, H, K = shape_of(shape)
    d = inputs(B, T, H, DTYPES[dname], K=K, V=K)
    return d, torch.randn_like(d["v"])


def clear_grads(d: dict) -> None:
    """Drop the leaves' accumulated gradients (a step accumulates into .grad)."""
    for t in d.values():
        t.grad = None


def timings(fns: dict, shapes: list, dtypes: list, rounds: int) -> list[str]:
    names = list(fns)
    ratios = " | ".join(f"{n} / {names[0]}" for n in names[1:])
    rows = [f"| shape | dtype | {' | '.join(f'{n} ms' for n in names)} | {ratios} |",
            "|---|---|" + "---:|" * (2 * len(names) - 1)]
    for dname in dtypes:
        for text in shapes:
            d, do = case(text, dname)
            times = {n: [] for n in names}
            for _ in range(rounds):
                for n, fn in fns.items():
                    times[n].append(do_bench(lambda fn=fn, d=d, do=do: step(fn, d, do), warmup=50, rep=300,
                                             grad_to_none=list(d.values())))
            med = {n: statistics.median(t) for n, t in times.items()}
            rows.append(f"| {text} | {dname} | {' | '.join(f'{med[n]:.3f}' for n in names)} | "
                        f"{' | '.join(f'{med[n] / med[names[0]]:.3f}' for n in names[1:])} |")
            print(rows[-1], flush=True)
            del d, do
            torch.cuda.empty_cache()
    return rows


def memory(fns: dict, shapes: list, dtypes: list) -> list[str]:
    """Peak memory (GiB above the inputs) of one fwd+bwd step of every package, after a warm-up step."""
    names = list(fns)
    rows = [f"| shape | dtype | {' | '.join(f'{n} peak GiB' for n in names)} |", "|---|---|" + "---:|" * len(names)]
    for dname in dtypes:
        for text in shapes:
            d, do = case(text, dname)
            peaks = {}
            for n, fn in fns.items():
                step(fn, d, do)
                clear_grads(d)
                peaks[n] = peak_memory_gib(lambda fn=fn, d=d, do=do: step(fn, d, do), do.device)
                clear_grads(d)
            rows.append(f"| {text} | {dname} | {' | '.join(f'{peaks[n]:.3f}' for n in names)} |")
            del d, do
            torch.cuda.empty_cache()
    return rows


def profile(fns: dict, text: str) -> list[str]:
    """Kernel times per fwd+bwd step of every package at `text` ("B2-T8192-H32", or "B2-T8192-H32:fp16")."""
    text, _, dname = text.partition(":")
    dname = dname or "bf16"
    d, do = case(text, dname)
    per = {n: kernel_times(fn, d, do) for n, fn in fns.items()}
    clear_grads(d)
    keys = sorted({k for p in per.values() for k in p}, key=lambda k: -max(p.get(k, 0) for p in per.values()))
    rows = [f"{text} {dname}, us per fwd+bwd step (torch.profiler, 10 steps; grads accumulate into .grad)",
            f"| kernel | {' | '.join(per)} |", "|---|" + "---:|" * len(per)]
    rows += [f"| {k[:60]} | {' | '.join(f'{p.get(k, 0):.1f}' for p in per.values())} |" for k in keys]
    rows.append(f"| total | {' | '.join(f'{sum(p.values()):.1f}' for p in per.values())} |")
    return rows


def errors(fns: dict) -> list[str]:
    from tests.test_vs_fla import SEEDS, compare, fp16_masked, kimi_bf16

    try:
        from fla.ops.kda import chunk_kda as fla
    except ImportError:
        fla = None
    rows = []
    for case, build in (("Kimi flags bf16 B1 T512 H4", kimi_bf16), ("fla masked varlen fp16", fp16_masked)):
        errs = compare([build(s) for s in SEEDS], {**fns, "fla": fla})
        tensors = list(next(iter(errs.values())))
        rows += [f"{case}: pooled rel RMSE vs fp64 over {len(SEEDS)} seeds",
                 f"| impl | {' | '.join(tensors)} |", "|---|" + "---:|" * len(tensors)]
        rows += [f"| {n} | {' | '.join(f'{e[t]:.2e}' for t in tensors)} |" for n, e in errs.items()]
    return rows


def intra_bwd_sweep(spec: str, configs: str, text: str) -> list[str]:
    """`config_sweep` of the chunk-local backward's configurations `configs` ("BK,BV,warps,stages;...") at `text`
    (SHAPE[:dtype], bf16 by default)."""
    names = ("BK", "BV", "num_warps", "num_stages")
    entries = [{f: int(v) for f, v in zip(names, c.split(","), strict=True)} for c in configs.split(";")]
    return config_sweep(spec, "intra.intra_bwd_config", text, entries)


def parse_sweep(text: str) -> tuple[str, str, list[dict]]:
    """"MODULE.FUNC@SHAPE[:dtype]=FIELD=VALUE,...;..." -> (MODULE.FUNC, SHAPE[:dtype], one {FIELD: VALUE} per entry)."""
    target, _, configs = text.partition("=")
    func, _, where = target.partition("@")
    return func, where, [{f: int(v) for f, v in (x.split("=") for x in c.split(","))} for c in configs.split(";")]


def replace(cfg, **fields):
    """A launch configuration (dataclass or NamedTuple) with `fields` replaced."""
    return cfg._replace(**fields) if hasattr(cfg, "_replace") else dataclasses.replace(cfg, **fields)


def config_sweep(spec: str, func: str, where: str, entries: list[dict]) -> list[str]:
    """fwd+bwd time of package `spec` (NAME=DIR:MODULE) at `where` (SHAPE[:dtype], bf16 by default) with its launch
    configuration function `func` ("MODULE.FUNC", e.g. "state.state_config") returning the table's configuration with
    the fields of each entry replaced, the table's own first."""
    name, path = spec.split("=", 1)
    package = path.split(":", 1)[1]
    mod_name, _, fn_name = func.rpartition(".")
    mod = importlib.import_module(f"{package}.{mod_name}")
    table = getattr(mod, fn_name)
    shape, _, dname = where.partition(":")
    dname = dname or "bf16"
    d, do = case(shape, dname)
    fn = importlib.import_module(package).chunk_kda
    rows = [f"{name}: {func} configurations, {shape} {dname} fwd+bwd", "| config | ms |", "|---|---:|"]
    for fields in [{}, *entries]:
        setattr(mod, fn_name, lambda *a, fields=fields: replace(table(*a), **fields))
        try:
            step(fn, d, do)
            ms = f"{do_bench(lambda: step(fn, d, do), warmup=50, rep=300, grad_to_none=list(d.values())):.3f}"
        except Exception as exc:  # a configuration this GPU cannot run
            ms = f"failed: {type(exc).__name__}"
        label = ",".join(f"{f}={v}" for f, v in fields.items()) or "table"
        rows.append(f"| {label} | {ms} |")
        print(rows[-1], flush=True)
    setattr(mod, fn_name, table)
    return rows


def deterministic(fn) -> bool:
    from tests.test_vs_fla import _cotangents, _run, kimi_bf16

    d = kimi_bf16(0)
    do, dht = _cotangents(d, 0)
    a, b = _run(fn, d, do, dht), _run(fn, d, do, dht)
    return all(torch.equal(a[n], b[n]) for n in a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkg", action="append", required=True)
    ap.add_argument("--shapes", default="B2-T8192-H32,B2-T8192-H64,B8-T2048-H32,B1-T8192-H16")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", default=None, help="SHAPE[:dtype],... kernel times per package")
    ap.add_argument("--errors", action="store_true")
    ap.add_argument("--memory", action="store_true", help="peak memory of one fwd+bwd step per package and shape")
    ap.add_argument("--intra-bwd-configs", default=None, help="BK,BV,warps,stages;... tried on the last --pkg")
    ap.add_argument("--sweep", action="append", default=[],
                    help="MODULE.FUNC@SHAPE[:dtype]=FIELD=VALUE,...;... tried on the last --pkg (repeatable)")
    args = ap.parse_args()
    fns = dict(load(s) for s in args.pkg)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    out = timings(fns, args.shapes.split(","), args.dtypes.split(","), args.rounds) if args.shapes else []
    sections = []
    for text in args.profile.split(",") if args.profile else []:
        sections.append(lambda text=text: profile(fns, text))
    sweep_shape = (args.profile or "B2-T8192-H32").split(",")[0]
    if args.intra_bwd_configs:
        sections.append(lambda: intra_bwd_sweep(args.pkg[-1], args.intra_bwd_configs, sweep_shape))
    for text in args.sweep:
        sections.append(lambda text=text: config_sweep(args.pkg[-1], *parse_sweep(text)))
    if args.memory:
        sections.append(lambda: memory(fns, args.shapes.split(","), args.dtypes.split(",")))
    if args.errors:
        sections.append(lambda: errors(fns))
    sections.append(lambda: ["bit-identical reruns (Kimi bf16 case): "
                             + ", ".join(f"{n} {deterministic(fn)}" for n, fn in fns.items())])
    for section in sections:
        rows = section()
        print("\n".join(rows), flush=True)
        out += rows
    print("summary: " + out[-1], flush=True)

if __name__ == "__main__":
    main()

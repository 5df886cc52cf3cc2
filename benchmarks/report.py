"""Render benchmark rows (JSONL from ``benchmarks.run`` or ``benchmarks.gpu_check``) as markdown and PNG plots.

    python -m benchmarks.report OUT/bench-*.jsonl [more.jsonl ...] --out docs/benchmarks/

Writes ``report.md`` (provenance, speedups against fla, every timing with its achieved rates, rows that were not
timed and why, cold starts) and, when matplotlib is importable, ``speedup.png`` (speedup by shape) and
``time_vs_T.png`` (median time against T); without matplotlib the report says the plots were skipped.
A report can be assembled from several JSONL files; rows of other kinds (e.g. gpu_check's checks) are counted only.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

BASELINE = "fla"
SPEEDUP_KEY = ("gpu", "suite", "shape", "flags", "dtype", "mode")


def load_rows(paths: list[Path]) -> list[dict]:
    """All rows of the JSONL files, in order; a line that is not a JSON object raises ValueError naming it."""
    rows = []
    for path in paths:
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def attach_speedups(rows: list[dict]) -> list[dict]:
    """Fill ``speedup_vs_fla`` (fla median / this median) on timed rows that lack it, matching rows by
    (gpu, suite, shape, flags, dtype, mode); the last timed fla row of a key is the baseline. Returns ``rows``."""
    baseline = {}
    for row in rows:
        if row.get("impl") == BASELINE and row.get("status") == "ok" and row.get("median_ms"):
            baseline[tuple(row.get(k) for k in SPEEDUP_KEY)] = row["median_ms"]
    for row in rows:
        base = baseline.get(tuple(row.get(k) for k in SPEEDUP_KEY))
        if row.get("speedup_vs_fla") is None and row.get("status") == "ok" and base and row.get("median_ms"):
            row["speedup_vs_fla"] = base / row["median_ms"]
    return rows


def is_timed(row: dict) -> bool:
    """A row with a time: status ok and a median."""
    return row.get("status") == "ok" and row.get("median_ms") is not None


def cell(value, spec: str = "") -> str:
    """A markdown cell: '-' for missing or NaN values, numbers formatted by ``spec``, '|' and newlines escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if spec and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """A GitHub markdown table; columns whose index is in ``numeric`` are right-aligned."""
    numeric = numeric or set()
    align = ["---:" if i in numeric else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row has {len(row)} cells, headers {len(headers)}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _provenance(rows: list[dict]) -> str:
    keys = ("gpu", "cc", "sm_count", "cuda", "torch", "triton", "fla", "git_sha", "copy_tbps", "matmul_tflops",
            "autotune_cache")
    seen: dict[tuple, list[str]] = {}
    for row in rows:
        seen.setdefault(tuple(row.get(k) for k in keys), []).append(row.get("time_utc") or "")
    body = []
    for values, times in seen.items():
        stamps = sorted(t for t in times if t)
        when = f"{stamps[0]} .. {stamps[-1]}" if stamps else "-"
        body.append([cell(v, ".2f" if k == "copy_tbps" else ".0f" if k == "matmul_tflops" else "")
                     for k, v in zip(keys, values, strict=True)] + [when])
    headers = ["GPU", "cc", "SMs", "CUDA", "torch", "triton", "fla", "git", "copy TB/s", "bf16 mm TFLOP/s",
               "autotune cache", "when"]
    return markdown_table(headers, body, numeric={8, 9})


def _speedups(timed: list[dict]) -> str:
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for row in timed:
        groups[tuple(row.get(k) for k in SPEEDUP_KEY)][row["impl"]] = row
    body = []
    for by_impl in groups.values():
        if BASELINE not in by_impl:
            continue
        for impl, row in by_impl.items():
            if impl == BASELINE:
                continue
            body.append([cell(row.get("suite")), cell(row.get("shape")), cell(row.get("flags")), cell(row.get("dtype")),
                         cell(row.get("mode")), cell(impl), cell(row["median_ms"], ".3f"),
                         cell(by_impl[BASELINE]["median_ms"], ".3f"), cell(row.get("speedup_vs_fla"), ".2f")])
    if not body:
        return "No case has timings of both fla and another implementation."
    headers = ["suite", "shape", "flags", "dtype", "mode", "impl", "ms", "fla ms", "speedup"]
    return markdown_table(headers, body, numeric={6, 7, 8}) + _geomeans(timed)


def _geomeans(timed: list[dict]) -> str:
    """One line per (impl, flags, dtype, mode): the geometric mean of its speedups against fla and the lowest."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in timed:
        if row["impl"] != BASELINE and row.get("speedup_vs_fla"):
            groups[(row["impl"], row.get("flags"), row.get("dtype"), row.get("mode"))].append(row)
    lines = []
    for (impl, flags, dtype, mode), rows in groups.items():
        geo = math.exp(sum(math.log(r["speedup_vs_fla"]) for r in rows) / len(rows))
        low = min(rows, key=lambda r: r["speedup_vs_fla"])
        lines.append(f"- {impl} {mode} {flags} {dtype}: geomean x{geo:.3f} over {len(rows)} shapes, lowest "
                     f"x{low['speedup_vs_fla']:.3f} ({low.get('suite')} {low.get('shape')})")
    return "\n\n" + "\n".join(lines) if lines else ""


def _timings(timed: list[dict]) -> str:
    headers = ["shape", "flags", "dtype", "mode", "impl", "median ms", "p20-p80 ms", "vs fla", "TB/s", "% BW",
               "TFLOP/s", "% MMA", "% of floor", "peak GiB", "rel RMSE", "grad RMSE", "warm-up s"]
    parts = []
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for row in timed:
        by_suite[row.get("suite") or "-"].append(row)
    for suite, rows in by_suite.items():
        body = []
        for row in rows:
            warm = row.get("warmup_fwdbwd_s") if row.get("mode") == "fwdbwd" else row.get("warmup_fwd_s")
            body.append([cell(row.get("shape")), cell(row.get("flags")), cell(row.get("dtype")), cell(row.get("mode")),
                         cell(row.get("impl")), cell(row.get("median_ms"), ".3f"),
                         f"{cell(row.get('p20_ms'), '.3f')}-{cell(row.get('p80_ms'), '.3f')}",
                         cell(row.get("speedup_vs_fla"), ".2f"), cell(row.get("tbps"), ".2f"),
                         cell(row.get("pct_bw"), ".0f"), cell(row.get("tflops"), ".1f"),
                         cell(row.get("pct_mma"), ".0f"),
                         cell(row.get("pct_of_floor"), ".0f"), cell(row.get("peak_mem_gib"), ".2f"),
                         cell(row.get("rel_rmse"), ".1e"), cell(row.get("grad_rel_rmse"), ".1e"), cell(warm, ".1f")])
        parts.append(f"### {suite}\n\n" + markdown_table(headers, body, numeric=set(range(5, 17))))
    return "\n\n".join(parts) if parts else "No timed rows."


def _not_timed(rows: list[dict]) -> str:
    body = [[cell(r.get("impl")), cell(r.get("mode")), cell(r.get("suite")), cell(r.get("shape")), cell(r.get("flags")),
             cell(r.get("dtype")), cell(r.get("status")), cell((r.get("reason") or "")[:300])] for r in rows]
    headers = ["impl", "mode", "suite", "shape", "flags", "dtype", "status", "reason"]
    return markdown_table(headers, body) if body else "Every row was timed."


def _cold_starts(rows: list[dict]) -> str:
    body = [[cell(r.get("impl")), cell(r.get("shape")), cell(r.get("flags")), cell(r.get("dtype")),
             cell(r.get("status")), cell(r.get("cold_start_s"), ".1f"), cell(r.get("first_call_s"), ".1f"),
             cell((r.get("reason") or "")[:300])] for r in rows]
    headers = ["impl", "shape", "flags", "dtype", "status", "start -> first fwd+bwd s", "first call s", "reason"]
    return markdown_table(headers, body, numeric={5, 6})


def render_markdown(rows: list[dict], plot_notes: list[str] | None = None) -> str:
    """The whole report as markdown."""
    rows = attach_speedups([dict(r) for r in rows])
    bench = [r for r in rows if r.get("kind", "bench") == "bench"]
    timed = [r for r in bench if is_timed(r)]
    untimed = [r for r in bench if not is_timed(r)]
    cold = [r for r in rows if r.get("kind") == "cold_start"]
    other = len(rows) - len(bench) - len(cold)
    sections = [
        "# chunk_kda benchmarks",
        f"{len(timed)} timed rows, {len(untimed)} not timed, {len(cold)} cold starts"
        + (f", {other} other rows (checks) not shown" if other else "") + ".",
        "Times are medians of `triton.testing.do_bench` (L2 flushed, inputs rotated), forward under `no_grad`, "
        "fwd+bwd = forward + `o.backward(do)` into q, k, v, g, beta. TB/s and TFLOP/s come from the model in "
        "`benchmarks/model.py` (fwd+bwd FLOPs = 3x forward); % BW and % MMA are against the copy bandwidth and "
        "bf16 matmul rate measured in the same run; % of floor = roofline floor / median. rel RMSE: forward "
        "output vs the fp64 oracle on the first sequence (<= 1024 tokens); grad RMSE: worst gradient on a small "
        "case with the same heads. Warm-up: wall time of the first call (compile + autotune; where the provenance "
        "says autotuning results were restored, fla's first calls skipped the tuning they had done before).",
        "## Provenance\n\n" + _provenance(bench + cold),
        "## Speedup against fla\n\n" + _speedups(timed),
        "## Timings\n\n" + _timings(timed),
        "## Not timed\n\n" + _not_timed(untimed),
    ]
    if cold:
        sections.append("## Cold start (fresh process, empty Triton cache)\n\n" + _cold_starts(cold))
    if plot_notes:
        sections.append("## Plots\n\n" + "\n\n".join(plot_notes))
    return "\n\n".join(sections) + "\n"


def time_vs_t_groups(timed: list[dict]) -> dict[tuple, list[tuple[int, float]]]:
    """Fixed-length timed rows grouped by everything but T; only groups with at least two values of T."""
    groups: dict[tuple, dict[int, float]] = defaultdict(dict)
    for row in timed:
        if row.get("varlen"):
            continue
        key = tuple(row.get(k) for k in ("impl", "mode", "flags", "dtype", "B", "H", "HV", "K", "V", "gpu"))
        groups[key][row["T"]] = row["median_ms"]
    return {key: sorted(points.items()) for key, points in groups.items() if len(points) >= 2}


def save_png(fig, path: Path, colors: int = 16) -> None:
    """`fig` as a PNG of at most `colors` colours (a third of the bytes of a full-colour plot or less: the reports'
    plots live in docs/, which stays small)."""
    from PIL import Image  # Pillow: a dependency of matplotlib

    fig.savefig(path, dpi=120)
    Image.open(path).convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def write_plots(rows: list[dict], out: Path, prefix: str = "") -> list[str]:
    """Write <prefix>speedup.png and <prefix>time_vs_T.png into ``out``; returns markdown lines (images or notes)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["Plots skipped: matplotlib is not importable here (`pip install matplotlib`)."]
    rows = attach_speedups([dict(r) for r in rows])
    timed = [r for r in rows if r.get("kind", "bench") == "bench" and is_timed(r)]
    notes = []
    with_speedup = [r for r in timed if r.get("impl") != BASELINE and r.get("speedup_vs_fla")]
    if with_speedup:
        modes = sorted({r["mode"] for r in with_speedup})
        fig, axes = plt.subplots(len(modes), 1, figsize=(max(6.0, 0.5 * len(with_speedup) + 3), 4 * len(modes)),
                                 squeeze=False)
        for ax, mode in zip(axes[:, 0], modes, strict=True):
            sel = [r for r in with_speedup if r["mode"] == mode]
            labels = [f"{r['impl']} {r.get('suite')}\n{r['shape']}\n{r.get('flags')} {r.get('dtype')}" for r in sel]
            bars = ax.bar(range(len(sel)), [r["speedup_vs_fla"] for r in sel], color="tab:blue")
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(sel)))
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("speedup vs fla (x)")
            ax.set_title(f"{mode}: fla median / median")
        fig.tight_layout()
        save_png(fig, out / f"{prefix}speedup.png")
        plt.close(fig)
        notes.append(f"![speedup against fla]({prefix}speedup.png)")
    else:
        notes.append("No speedup plot: no case has timings of both fla and another implementation.")
    groups = time_vs_t_groups(timed)
    if groups:
        fig, ax = plt.subplots(figsize=(8, 5))
        for (impl, mode, flags, dtype, B, H, HV, K, V, _), points in groups.items():
            ax.plot([t for t, _ in points], [ms for _, ms in points], marker="o",
                    label=f"{impl} {mode} {flags} {dtype} B{B} H{H} HV{HV} K{K} V{V}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("T (tokens)")
        ax.set_ylabel("median ms")
        ax.legend(fontsize=7)
        ax.set_title("time against sequence length")
        fig.tight_layout()
        save_png(fig, out / f"{prefix}time_vs_T.png")
        plt.close(fig)
        notes.append(f"![time against T]({prefix}time_vs_T.png)")
    else:
        notes.append("No time-vs-T plot: no group of fixed-length rows with two or more values of T.")
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="JSONL files written by benchmarks.run or gpu_check")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.md and the PNG plots")
    parser.add_argument("--name", default="report",
                        help="file stem: writes NAME.md and NAME_speedup.png / NAME_time_vs_T.png (default: report.md, "
                             "speedup.png, time_vs_T.png)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.inputs if not p.is_file()]
    if missing:
        print(f"benchmarks.report: input file(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = load_rows(args.inputs)
    if not rows:
        print(f"benchmarks.report: no rows in {', '.join(map(str, args.inputs))}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    notes = write_plots(rows, args.out, "" if args.name == "report" else f"{args.name}_")
    path = args.out / f"{args.name}.md"
    path.write_text(render_markdown(rows, notes))
    print(f"wrote {path} ({len(rows)} rows)" + "".join(f"\n  {n}" for n in notes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

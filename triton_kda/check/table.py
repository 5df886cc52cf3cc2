"""Result tables shared by `kda-check` and `kda-portability`: build, print, write (CSV + JSON), exit code.

A table is a pandas DataFrame with one row per result dataclass (`runner.Row` or `portability.PortabilityRow`),
plus a `status` column. Rows with `informational` True (fla's) show pass/fail but never fail the run; rows with
`regressed` True (set by a baseline comparison) fail it like a failed tolerance does.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

__all__ = ["FLA_BACKENDS", "build_table", "compare_with_fla", "exit_code", "gating_failures", "judged_error", "render",
           "with_status", "worse_than_fla", "write_outputs"]

_FLOAT_COLUMNS = ("rel_rmse", "rel_terms", "max_abs", "threshold", "base_rel_rmse", "base_max_abs", "fla_error")
# fla's backends: its chunk_kda and its fused_recurrent_kda
FLA_BACKENDS = ("fla", "fla_recurrent")
# the fla backend a backend of ours is held against: recurrent ones against fla's fused_recurrent_kda, the chunk
# backends (Triton, compiled) against fla's chunk_kda
_FLA_PEER = {"recurrent": "fla_recurrent", "recurrent_pool": "fla_recurrent"}


def _status(row: pd.Series) -> str:
    word = "FAIL" if not row["passed"] else ("REGRESSED" if row.get("regressed", False) else "pass")
    return f"{word.lower()} (info)" if row.get("informational", False) else word


def build_table(rows: list) -> pd.DataFrame:
    """DataFrame of `rows` (dataclass instances of one type), in the given order, with a `status` column."""
    if not rows:
        raise ValueError("build_table: `rows` is empty: nothing was checked")
    df = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    if "rel_terms" in df:  # kda-check: the second error column beside the first
        df.insert(df.columns.get_loc("rel_rmse") + 1, "rel_terms", df.pop("rel_terms"))
    return with_status(df)


def with_status(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its `status` column (re)computed from passed / regressed / informational, placed before
    `reason`."""
    status = df.apply(_status, axis=1)
    df = df.drop(columns=["status"], errors="ignore")
    at = df.columns.get_loc("reason") if "reason" in df else len(df.columns)
    df.insert(at, "status", status)
    return df


def judged_error(df: pd.DataFrame) -> pd.Series:
    """The error each row's threshold judges: rel_terms where a kda-check row has it (dA_log, ddt_bias), else
    rel_rmse."""
    if "rel_terms" not in df:
        return df["rel_rmse"]
    return df["rel_terms"].where(df["rel_terms"].notna(), df["rel_rmse"])


def compare_with_fla(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with columns fla_error (fla's judged error, `judged_error`, on the same config and tensor and inputs)
    and vs_fla (ours / fla's, "worse" appended above 1) on every non-fla row whose fla peer ran: fla's chunk_kda
    for the chunk backends, its fused_recurrent_kda for our recurrent ones; "-" elsewhere. `df` unchanged when no fla
    row is present (or it is not a kda-check table). Informational: the status stays."""
    if "backend" not in df:  # a kda-portability table
        return df
    is_fla = df["backend"].isin(FLA_BACKENDS)
    if not is_fla.any():
        return df
    err = judged_error(df)
    ref = {(b, c, t): e for b, c, t, e in zip(df["backend"][is_fla], df["config"][is_fla], df["tensor"][is_fla],
                                            err[is_fla], strict=True)}
    theirs = [math.nan if b in FLA_BACKENDS else ref.get((_FLA_PEER.get(b, "fla"), c, t), math.nan)
              for c, t, b in zip(df["config"], df["tensor"], df["backend"], strict=True)]
    out = df.drop(columns=["fla_error", "vs_fla"], errors="ignore").copy()
    out["fla_error"] = theirs
    out["vs_fla"] = [_ratio(ours, f) for ours, f in zip(err, theirs, strict=True)]
    return with_status(out)


def _ratio(ours: float, theirs: float) -> str:
    if math.isnan(ours) or math.isnan(theirs):
        return "-"
    r = ours / theirs if theirs > 0 else (1.0 if ours == 0 else math.inf)
    return f"{r:.2f}" + (" worse" if r > 1 else "")


def worse_than_fla(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of `df` (after `compare_with_fla`) whose error is above fla's on the same inputs."""
    if "vs_fla" not in df:
        return df.iloc[0:0]
    return df[df["vs_fla"].str.endswith("worse")]


def gating_failures(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that fail the run: not informational, and failed or regressed."""
    bad = ~df["passed"].astype(bool)
    if "regressed" in df:
        bad |= df["regressed"].astype(bool)
    if "informational" in df:
        bad &= ~df["informational"].astype(bool)
    return df[bad]


def exit_code(df: pd.DataFrame) -> int:
    """0 when no row fails the run, else 1."""
    return 1 if len(gating_failures(df)) else 0


def _cell(x, column: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if column in _FLOAT_COLUMNS:
        return f"{x:.2e}"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def render(df: pd.DataFrame) -> str:
    """Fixed-width text of `df` for the terminal (errors in %.2e, missing values as "-", text left-aligned,
    numbers right-aligned), without the bookkeeping columns passed / informational / regressed, followed by a
    one-line summary."""
    shown = df.drop(columns=[c for c in ("passed", "informational", "regressed") if c in df])
    columns = []
    for c in shown.columns:
        cells = [_cell(x, c) for x in shown[c]]
        width = max([len(c), *map(len, cells)])
        right = pd.api.types.is_numeric_dtype(shown[c]) and not pd.api.types.is_bool_dtype(shown[c])
        columns.append([(v.rjust(width) if right else v.ljust(width)) for v in [c, *cells]])
    lines = ["  ".join(parts).rstrip() for parts in zip(*columns, strict=True)]
    n_fail = len(gating_failures(df))
    n_info = int(df["status"].isin(["fail (info)", "regressed (info)"]).sum())
    n_worse = len(worse_than_fla(df))
    summary = (f"{len(df)} rows: {n_fail} failing the run" + (f", {n_info} informational failures" if n_info else "")
               + (f", {n_worse} tensors less exact than fla" if n_worse else ""))
    return "\n".join([*lines, summary])


def write_outputs(df: pd.DataFrame, out_dir: str | Path, stem: str) -> list[Path]:
    """Write `df` as `<out_dir>/<stem>.csv` and `<out_dir>/<stem>.json` (a list of records, NaN as null);
    creates out_dir. Returns the two paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out / f"{stem}.csv", out / f"{stem}.json"
    df.to_csv(csv_path, index=False)
    df.to_json(json_path, orient="records", indent=1)
    return [csv_path, json_path]

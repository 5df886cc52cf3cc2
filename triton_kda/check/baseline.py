"""Error baselines: save the errors of a run, and flag rows whose errors grew since.

A baseline is a JSON file `{"format": ..., "meta": {...}, "rows": [{config, backend, tensor, rel_rmse,
max_abs}, ...]}` (NaN stored as null). A row regresses when an error is more than `FACTOR` times its baseline value
and above an absolute floor (so 1e-9 -> 3e-9 noise does not count), or when it is NaN now but was finite before.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from triton_kda.check.table import with_status

__all__ = ["FACTOR", "FLOORS", "compare_baseline", "load_baseline", "regressed", "save_baseline"]

FORMAT = "kda-check-baseline/1"
KEY = ["config", "backend", "tensor"]
FACTOR = 2.0
# absolute floor per error column: growth that stays below it is noise, never a regression
FLOORS = {"rel_rmse": 1e-6, "max_abs": 1e-5}


def _nan_to_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def save_baseline(df: pd.DataFrame, path: str | Path, meta: dict | None = None) -> None:
    """Store the errors of every row of `df` (a kda-check table) in `path`, with free-form `meta` (versions,
    device)."""
    rows = [
        {**{k: r[k] for k in KEY}, **{c: _nan_to_none(r[c]) for c in FLOORS}}
        for r in df[KEY + list(FLOORS)].to_dict("records")
    ]
    Path(path).write_text(json.dumps({"format": FORMAT, "meta": meta or {}, "rows": rows}, indent=1) + "\n")


def load_baseline(path: str | Path) -> pd.DataFrame:
    """The rows of the baseline file `path` as a DataFrame with columns config, backend, tensor, rel_rmse,
    max_abs. Raises ValueError naming the file when it is not a kda-check baseline."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"baseline {path}: not JSON ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), list):
        raise ValueError(f"baseline {path}: expected a {FORMAT!r} file written by --save-baseline")
    return pd.DataFrame(data["rows"], columns=KEY + list(FLOORS)).astype({c: float for c in FLOORS})


def regressed(new: float, old: float, floor: float) -> bool:
    """True when the error `new` regressed against its baseline `old`: NaN now but finite before, or more than
    FACTOR * old and above `floor`. A NaN baseline (failed before) never makes a regression."""
    if math.isnan(old):
        return False
    if math.isnan(new):
        return True
    return new > FACTOR * old and new > floor


def compare_baseline(df: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """`df` with columns base_rel_rmse, base_max_abs (NaN for rows the baseline lacks) and `regressed`, and its
    status recomputed. Rows are matched on (config, backend, tensor)."""
    base = baseline.drop_duplicates(KEY, keep="last").rename(columns={c: f"base_{c}" for c in FLOORS})
    merged = df.drop(columns=[c for c in base.columns if c not in KEY and c in df] + ["regressed"], errors="ignore")
    merged = merged.merge(base, on=KEY, how="left")
    merged["regressed"] = [
        any(regressed(r[c], r[f"base_{c}"], floor) for c, floor in FLOORS.items())
        for r in merged.to_dict("records")
    ]
    return with_status(merged)

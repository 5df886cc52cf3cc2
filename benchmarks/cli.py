"""Command-line plumbing shared by the benchmark scripts: argparse types, the CUDA requirement, progress lines and
the JSONL row files."""
from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

_T_START = time.perf_counter()


def log(message: str) -> None:
    """Print a progress line with the seconds since start, flushed at once."""
    print(f"[{time.perf_counter() - _T_START:7.1f}s] {message}", flush=True)


def csv_choice(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """argparse type: a comma-separated, non-empty subset of ``choices`` (order kept, repeats dropped)."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"got {text!r}; expected a comma-separated subset of {', '.join(choices)}"
            )
        return list(dict.fromkeys(items))

    return parse


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def require_cuda(prog: str) -> str | None:
    """None when a CUDA GPU is usable, else the message to print before exiting with code 2."""
    if torch.cuda.is_available():
        return None
    return (f"{prog} needs a CUDA GPU, but torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}); nothing was timed. Run it on a machine with an NVIDIA GPU.")


def fmt(value, spec: str) -> str:
    """Format a number, or '-' for a missing one."""
    return "-" if value is None else format(value, spec)


class JsonlWriter:
    """Appends rows to one JSONL file, flushed row by row so a run cut short keeps what it measured."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def write(self, rows: list[dict]) -> None:
        with self.path.open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def output_path(out: Path, stem: str) -> Path:
    """``out/<stem>-<UTC time>.jsonl``, one file per run."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return out / f"{stem}-{stamp}.jsonl"

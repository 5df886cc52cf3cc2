"""Build the CUDA sources under ``cuda_fast/csrc/`` with nvcc.

The kernels are plain CUDA C++ with a C entry point (no torch headers), built into a shared library that
``cuda_fast.sm90`` loads through ctypes, so one build serves any torch version. Two places hold libraries:
- a wheel's ``cuda_fast/lib/``: one library per target beside ``manifest.json`` (targets, the sources' hash, nvcc's
  version), built when the wheel is (``package``; ``setup.py``), used while the hash matches the sources here;
- the build cache ``$TRITON_KDA_CUDA_CACHE`` (default ``~/.cache/triton_kda/cuda_fast``), filled on first use where
  no packaged library serves (an editable install), keyed by the sources, the flags, the target and nvcc's version;
  a finished build is moved into place atomically, so concurrent processes never load half a file.
nvcc comes from CUDA_HOME, CUDA_PATH, PATH, or the ``nvidia-cuda-nvcc`` wheel (with ``nvidia-cuda-cccl``).

    python -m cuda_fast.build                    # prebuild the library for the GPU of this machine
    python -m cuda_fast.build --arch 90a,100a    # prebuild for named targets (no GPU needed)
    python -m cuda_fast.build --cubin DIR        # compile-only: one cubin per source and target (what CI runs)
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cuda_fast.targets import CAPABILITY_TARGETS, TARGETS

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("kda_fwd.cu", "kda_intra_bwd.cu")
HEADERS = ("common.cuh",)
COMPILE_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr")
FLAGS = (*COMPILE_FLAGS, "-Xcompiler", "-fPIC")  # the shared library's
CACHE_ENV = "TRITON_KDA_CUDA_CACHE"
ARCHS_ENV = "TRITON_KDA_CUDA_ARCHS"  # a wheel's targets: comma-separated, "all" (the default) or "none"
PACKAGED = Path(__file__).resolve().parent / "lib"  # a wheel's libraries and their manifest
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "triton-kda-cuda-libraries/1"
EXTRA_FLAGS_ENV = "TRITON_KDA_NVCC_FLAGS"  # extra nvcc flags (experiments, e.g. -DKDA_K1_MIN_BLOCKS=3); part of the key


class BuildError(RuntimeError):
    """nvcc is missing or failed (the message holds its output)."""


def system_nvcc() -> str | None:
    """nvcc from ``$CUDA_HOME/bin`` (or ``$CUDA_PATH``), else the first on PATH, else None."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return shutil.which("nvcc")


def pip_nvcc() -> str | None:
    """nvcc of the ``nvidia-cuda-nvcc`` wheel (``nvidia/cu*/bin/nvcc`` of an importable ``nvidia`` package), or
    None."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for nvcc in sorted(Path(root).glob("cu*/bin/nvcc"), reverse=True):
            if nvcc.is_file():
                return str(nvcc)
    return None


def nvcc_path() -> str:
    """`system_nvcc`, else `pip_nvcc`; BuildError if there is neither."""
    found = system_nvcc() or pip_nvcc()
    if found is None:
        raise BuildError("nvcc not found (set CUDA_HOME, put nvcc on PATH or pip install nvidia-cuda-nvcc "
                         "nvidia-cuda-cccl); the CUDA backend cannot be built")
    return found


@functools.lru_cache(maxsize=4)
def nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def gencode(target: str) -> list[str]:
    if target not in TARGETS:
        raise ValueError(f"unknown CUDA target {target!r}; expected one of {', '.join(TARGETS)}")
    return ["-gencode", f"arch=compute_{target},code=sm_{target}"]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "triton_kda" / "cuda_fast")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def extra_flags() -> list[str]:
    return os.environ.get(EXTRA_FLAGS_ENV, "").split()


def source_hash() -> str:
    """sha256 of the CUDA sources and headers: what a packaged library must have been built from to serve."""
    key = hashlib.sha256()
    for name in (*SOURCES, *HEADERS):
        key.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
    return key.hexdigest()


def library(target: str) -> Path:
    """Path of the shared library for ``target`` ("90a" or "100a") in the build cache, building it first unless it is
    cached."""
    nvcc = nvcc_path()
    sources = [CSRC / name for name in SOURCES]
    flags = [*FLAGS, *extra_flags()]
    key = hashlib.sha256()
    for part in (nvcc_version(nvcc), target, *flags):
        key.update(part.encode())
    for src in (*sources, *(CSRC / name for name in HEADERS)):
        key.update(src.read_bytes())
    out = cache_dir() / f"kda_cuda_sm{target}_{key.hexdigest()[:16]}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    try:
        _run([nvcc, *flags, "-shared", *gencode(target), "-o", str(tmp), *map(str, sources)])
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def wheel_targets() -> tuple[str, ...]:
    """The targets a wheel carries: ``$TRITON_KDA_CUDA_ARCHS`` (comma-separated, "all" or "none"; default all)."""
    text = os.environ.get(ARCHS_ENV, "all").strip()
    if text == "none":
        return ()
    if text in ("", "all"):
        return TARGETS
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        raise ValueError(f"{ARCHS_ENV}: unknown targets {bad}; expected some of {', '.join(TARGETS)}, 'all' or 'none'")
    return targets


def package(out_dir: Path, targets: tuple[str, ...]) -> dict:
    """Build the library of each target into ``out_dir`` (``kda_cuda_sm<target>.so``) beside its manifest
    (``manifest.json``: format, targets, files, the sources' hash, nvcc's version, the flags); returns the manifest."""
    nvcc = nvcc_path()
    flags = [*FLAGS, *extra_flags()]
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for target in targets:
        files[target] = f"kda_cuda_sm{target}.so"
        _run([nvcc, *flags, "-shared", *gencode(target), "-o", str(out_dir / files[target]),
              *(str(CSRC / name) for name in SOURCES)])
    manifest = dict(format=MANIFEST_FORMAT, targets=list(targets), files=files, source_hash=source_hash(),
                    nvcc=nvcc_version(nvcc), flags=flags)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def packaged(target: str, lib_dir: Path = PACKAGED) -> tuple[Path | None, str]:
    """(path, "") of the packaged library for ``target`` in ``lib_dir`` when its manifest lists it and was built from
    these sources (`source_hash`), else (None, why not)."""
    path = lib_dir / MANIFEST
    if not path.is_file():
        return None, "no packaged library (an editable or source install)"
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        return None, f"{path} is not JSON ({e})"
    if manifest.get("format") != MANIFEST_FORMAT:
        return None, f"{path}: format {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}"
    if target not in manifest.get("targets", []):
        return None, f"the packaged libraries are for {manifest.get('targets')}, not {target}"
    if manifest.get("source_hash") != source_hash():
        return None, "the packaged library was built from other sources than cuda_fast/csrc/ holds"
    lib = lib_dir / manifest["files"][target]
    if not lib.is_file():
        return None, f"{lib} is missing"
    return lib, ""


def compile_cubins(out_dir: Path, targets: tuple[str, ...] = TARGETS) -> list[Path]:
    """Compile every source to a cubin per target (no GPU, no linking); returns the cubins."""
    nvcc = nvcc_path()
    out_dir.mkdir(parents=True, exist_ok=True)
    cubins = []
    for target in targets:
        for name in SOURCES:
            cubin = out_dir / f"{Path(name).stem}.sm{target}.cubin"
            _run([nvcc, *COMPILE_FLAGS, *extra_flags(), "-cubin", *gencode(target),
                  "-o", str(cubin), str(CSRC / name)])
            cubins.append(cubin)
    return cubins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuda_fast.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default=None,
                        help=f"comma-separated targets out of {','.join(TARGETS)} (default: this machine's GPU)")
    parser.add_argument("--cubin", type=Path, default=None, help="compile-only: write cubins to this folder")
    args = parser.parse_args(argv)
    if args.arch is not None:
        targets = tuple(t.strip() for t in args.arch.split(",") if t.strip())
    elif args.cubin is not None:
        targets = TARGETS
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA GPU here: name the targets with --arch")
        cc = torch.cuda.get_device_capability()
        if cc not in CAPABILITY_TARGETS:
            parser.error(f"compute capability {cc[0]}.{cc[1]} has no CUDA target here (only 9.0 and 10.0)")
        targets = (CAPABILITY_TARGETS[cc],)
    try:
        if args.cubin is not None:
            for cubin in compile_cubins(args.cubin, targets):
                print(cubin)
        else:
            for target in targets:
                print(library(target))
    except (BuildError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""sm_90 PTX fingerprints of some compile specs (`triton_kda.specs.compile_specs`), without a GPU: a refactor of kernel
code whose fingerprints do not change compiles to the same GPU code (line and debug records left out).

    python3 docs/benchmarks/scripts/ptx_fingerprint.py --arch 90 --match "state_bwd K128 V128 BT64 fp32,..."
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys

sys.path.insert(0, os.getcwd())

from triton_kda.check.portability import _compile  # noqa: E402
from triton_kda.specs import compile_specs  # noqa: E402


def fingerprint(ptx: str) -> str:
    ptx = "\n".join(line for line in ptx.splitlines() if not re.match(r"\s*(\.loc|\.file|//)", line))
    return hashlib.sha1(re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S).encode()).hexdigest()[:12]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--match", required=True, help="comma-separated exact spec names")
    args = ap.parse_args()
    names = set(args.match.split(","))
    for spec in compile_specs(args.arch):
        if spec.name in names:
            print(spec.name, fingerprint(_compile(spec, args.arch)[0].asm["ptx"]), flush=True)


if __name__ == "__main__":
    main()

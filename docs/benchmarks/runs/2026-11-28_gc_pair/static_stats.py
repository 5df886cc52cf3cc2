"""Registers, spills and SASS of the fp32 K = V = 128 BT64 kernels for sm_90, without a GPU (2026-11-28).

    PYTHONPATH=<tree> python docs/benchmarks/runs/2026-11-28_gc_pair/static_stats.py [kernel name ...]

Compiles each named spec of `triton_kda.specs.compile_specs(90)` (default: every fp32 K128 V128 BT64 one) with
Triton's ptxas (`triton_kda.check.portability`), disassembles the cubin with Triton's nvdisasm and prints one JSON line
per kernel: registers, spill bytes, static SASS instructions, local-memory loads / stores (LDL / STL) and fp64
instructions (DADD, DMUL, DFMA, DSETP and conversions to or from fp64). Static counts, not timings."""
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402

from triton_kda.check.portability import _compile, parse_ptxas_log  # noqa: E402
from triton_kda.specs import compile_specs  # noqa: E402

NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
FP64 = re.compile(r"\b(DADD|DMUL|DFMA|DSETP|F2F\.F64\S*|F2F\.F32\.F64)\b")


def main():
    names = set(sys.argv[1:])
    for spec in compile_specs(90):
        if names and spec.name not in names or not names and not (
                spec.name.endswith(" fp32") and ("K128 V128 BT64" in spec.name or "K128 BT64" in spec.name)):
            continue
        kernel, log = _compile(spec, 90)
        use = parse_ptxas_log(log)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            sass = subprocess.run([NVDISASM, "-c", f.name], capture_output=True, text=True, check=True).stdout
        ins = [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
        print(json.dumps(dict(kernel=spec.name, regs=use.registers, spill_st=use.spill_stores,
                              spill_ld=use.spill_loads, sass=len(ins), LDL=sum(" LDL" in x for x in ins),
                              STL=sum(" STL" in x for x in ins), fp64=sum(FP64.search(x) is not None for x in ins))),
              flush=True)


if __name__ == "__main__":
    main()

"""The tensor-core products of the fp32 intra forward and WY recompute as Triton compiles them for sm_90: their TTGIR
dot lines and the PTX's wgmma / mma.sync counts; the TTGIR files go to $OUT (or /tmp).

    python3 docs/benchmarks/scripts/ttgir_dots.py       (any machine with ptxas; no GPU needed)
"""
import os
import re

from triton_kda.check import portability as P
from triton_kda.specs import compile_specs

specs = {s.name: s for s in compile_specs(90)}
for name in ["intra_fwd K128 V128 BT64 fp32", "wy_fwd K128 V128 BT64 fp32"]:
    kernel, _ = P._compile(specs[name], 90)
    ttgir = kernel.asm["ttgir"]
    dots = [line.strip()[:220] for line in ttgir.splitlines() if "warp_group_dot" in line or "tt.dot" in line]
    print(name, len(dots))
    for d in dots:
        print("   ", d)
    ptx = kernel.asm["ptx"]
    print("  wgmma", len(re.findall(r"wgmma.mma_async", ptx)), "mma.sync", len(re.findall(r"mma.sync", ptx)))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"{name.split()[0]}_fp32.ttgir"), "w") as f:
        f.write(ttgir)

"""Run one kda-check configuration through the CPU interpreter with a GPU architecture's launch table.

Used to ask whether a GPU-only kda-check failure comes from the algorithm or from the GPU: the kernels run with the
tiles the GPU would use (`arch_of` patched) but in the interpreter's exact fp32 arithmetic.

    TRITON_INTERPRET=1 python docs/check/interpreter_repro.py B T H K V GATE [ARCH]

e.g. `1 1000 1 256 128 strong 90` (the fp32 K=256 strong-decay failure seen on the H200 on 2026-11-22, at 318efbf).
"""
import sys
import time

import torch

import triton_kda.intra
import triton_kda.state
import triton_kda.state_cp
import triton_kda.wy
from triton_kda.check.grid import CheckConfig
from triton_kda.check.runner import available_backends, check_config

B, T, H, K, V = map(int, sys.argv[1:6])
gate, arch = sys.argv[6], int(sys.argv[7]) if len(sys.argv) > 7 else 90
for module in (triton_kda.intra, triton_kda.state, triton_kda.state_cp, triton_kda.wy):
    module.arch_of = lambda device: arch
config = CheckConfig(B, T, H, H, K, V, gate=gate, initial_state=True, output_final_state=True)
start = time.time()
for row in check_config(config, available_backends(torch.device("cpu")), torch.device("cpu")):
    print(f"{row.tensor:12s} {row.rel_rmse:.2e} {'pass' if row.passed else 'FAIL'}")
print(f"{config.id} (sm_{arch} table, interpreter): {time.time() - start:.0f} s")

"""Where the backward's recompute (`wy_recompute` + `state_fwd`) and disable_recompute part ways, on
tests/test_chunk_bwd.py's DETERMINISM cases (fp32 and fp16; bf16 needs a GPU).

    python3 docs/benchmarks/scripts/recompute_probe.py          # the package on the path: PYTHONPATH=DIR:. for a copy

Prints, per case and dtype: which gradients differ (max abs difference) between recompute and disable_recompute and
between two runs of each; and which of the backward's inputs (the intra outputs, h, v_new) differ between the two.
"""
import torch

import triton_kda
import triton_kda.ops as O
from tests.test_chunk_bwd import DETERMINISM, _cotangents, _inputs, _kernel_grads

print("package:", triton_kda.__file__)
captured = []
chunk_bwd = O.chunk_bwd


def spy(do, dht, q, k, v, g, beta, a_log, dt, intra, h, v_new, *args, **kwargs):
    captured.append(dict(intra._asdict(), h=h, v_new=v_new))
    return chunk_bwd(do, dht, q, k, v, g, beta, a_log, dt, intra, h, v_new, *args, **kwargs)


def differ(a: dict, b: dict) -> dict:
    return {n: float((a[n].float() - b[n].float()).abs().max()) for n in a
            if a[n] is not None and not torch.equal(a[n], b[n])} or "identical"


O.chunk_bwd = spy
for params in DETERMINISM:
    for dtype in (torch.float32, torch.float16):
        captured.clear()
        d, chunk_size, _ = _inputs(params, dtype, seed=3)
        do, dht = _cotangents(d, seed=3)
        runs = [_kernel_grads(d, chunk_size, keep, do, dht) for keep in (False, True, False, True)]
        tag = f"T{params['T']} {dtype}"
        print(tag, "grads, recompute vs keep:", differ(runs[0], runs[1]))
        print(tag, "grads, repeats:", differ(runs[0], runs[2]), differ(runs[1], runs[3]))
        print(tag, "backward inputs, recompute vs keep:", differ(captured[0], captured[1]))

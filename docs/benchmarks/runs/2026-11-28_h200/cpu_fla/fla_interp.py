"""Import first to run fla-core 0.6.0's KDA kernels through Triton's CPU interpreter (as used on 2026-11-28): its
autotuner benchmarks no configuration (every one reports the same time, so the first runs). fla's sources also need
three edits there (applied with sed to a copy installed by `pip install --no-deps --target DIR` of the wheel):
  - `i_x.to(tl.int64)` on loop indices -> `tl.cast(i_x, tl.int64)` (the interpreter's loop indices are Python ints);
  - `gather(` -> `tl.gather(` in fla/ops/kda, fla/ops/common, fla/ops/gla (an alias of tl.gather escapes the
    interpreter's patching of triton.language);
  - `SAFE_GATE_DOT_PRECISION` in fla/ops/kda/chunk_intra.py -> 'ieee' (the interpreter takes no bf16x3; on a GPU with
    triton >= 3.6 fla uses bf16x3 there, so fla's safe-gate diagonal products are more exact here than on the GPU).
Then: TRITON_INTERPRET=1 PYTHONPATH=DIR:<repo>:<this folder> python dalog_heads.py ...
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import triton.runtime.autotuner as _autotuner  # noqa: E402

_autotuner.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles=None, **kw: [1.0, 1.0, 1.0]))

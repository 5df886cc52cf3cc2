"""cp_dist with the forward map's launch overridden: CP_FWD="warps,stages" (unset: the table's); times T=262144 only."""
import os
import sys
from dataclasses import replace

import benchmarks.cp_dist as cd
import triton_kda.cp as cp
import triton_kda.state_cp as scp
from triton_kda import configs

base = configs.cp_config


def patched(*a, **k):
    cfg = base(*a, **k)
    if os.environ.get("CP_FWD"):
        w, s = map(int, os.environ["CP_FWD"].split(","))
        cfg = replace(cfg, fwd_warps=w, fwd_stages=s)
    return cfg


cp.cp_config = scp.cp_config = patched
cd.FULL = cd.FULL._replace(time_Ts=(262144,)) if hasattr(cd.FULL, "_replace") else replace(cd.FULL, time_Ts=(262144,))
sys.exit(cd.main(sys.argv[1:]))

"""Package copies for this folder's runs, made from commit C (518274e), renamed so several import side by side.

    python3 docs/benchmarks/runs/2026-11-25_whole_chunk/make_variants.py C

.var/base    C as it is
.var/new     C + whole_chunk_eform.patch: bf16's chunk-local backward as one program per (chunk, v-head, K slice),
             64-row products (the intra sums one row-masked product per 16-row block) and the gate backward fused
.var/nost    C with the bf16 kernel's state-side products replaced by zeros (timing only: what they cost)
.var/wcs     .var/new with the intra sums replaced by loads of three fp32 [BT, BK] tiles (timing only: the
             whole-chunk state side and fused gate backward, reading what a separate intra-sum kernel would write)
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(".var")


def copy(name: str, commit: str, patch: Path | None = None) -> Path:
    d = ROOT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    subprocess.run(f"git archive {commit} triton_kda | tar -x -C {d}", shell=True, check=True)
    if patch is not None:
        subprocess.run(["git", "apply", "--directory", str(d), str(patch)], check=True)
    pkg = d / f"triton_kda_{name}"
    (d / "triton_kda").rename(pkg)
    for f in pkg.rglob("*.py"):
        t = re.sub(r"\btriton_kda\b", f"triton_kda_{name}", f.read_text())
        f.write_text(re.sub(r"^PROVIDERS = .*$", "PROVIDERS = ()", t, flags=re.M))
    return pkg / "intra.py"


def edit(path: Path, start: str, end: str | None, new: str, count: int = 1) -> None:
    """Replace the first occurrence of `start` (up to `end`, exclusive, when given) with `new`."""
    t = path.read_text()
    i = t.index(start)
    j = t.index(end, i) if end is not None else i + len(start)
    path.write_text(t[:i] + new + t[j:])


commit = sys.argv[1]
copy("base", commit)
copy("new", commit, HERE / "whole_chunk_eform.patch")
edit(copy("nost", commit),
     "    b_dqg, b_dkg, b_X, b_SdS = _state_side(", "    b_eG = tl.where(m_rk",
     "    b_dqg = tl.zeros((BC, BK), dtype=tl.float32)\n    b_dkg = tl.zeros((BC, BK), dtype=tl.float32)\n"
     "    b_X = tl.zeros((BC, BK), dtype=tl.float32)\n    b_SdS = tl.zeros((BK,), dtype=tl.float32)\n")
edit(copy("wcs", commit, HERE / "whole_chunk_eform.patch"),
     "    if tl.max(tl.max(tl.where(m_tk, b_Ga - b_G, 0.0), axis=1), axis=0) > RANGE_MAX:",
     "    # the state side: do S^T, v_new dS^T",
     "    p_x1 = tl.make_block_ptr(dq + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))\n"
     "    p_x2 = tl.make_block_ptr(dk + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))\n"
     "    b_Rq = tl.load(p_x1, boundary_check=(0, 1))\n    b_RL = tl.load(p_x2, boundary_check=(0, 1))\n"
     "    b_C = tl.load(p_G, boundary_check=(0, 1)) * 0.5\n\n")

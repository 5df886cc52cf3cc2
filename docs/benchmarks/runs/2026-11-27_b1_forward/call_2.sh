# Few-head forward shapes (no_grad, bf16, Kimi flags): the compiled forward (auto) against the Triton path
# (TRITON_KDA_BACKEND=triton) in one process, two alternating rounds (the second kept).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
# more few-head shapes, compiled (auto) against Triton (TRITON_KDA_BACKEND=triton) in one process
python3 - <<'PY' > $R/few_heads.txt 2>&1
import os, torch
from benchmarks.roofline import KIMI
from benchmarks.timing import cuda_timer
from triton_kda import chunk_kda
timer = cuda_timer(50, 300)
print("| B | T | H | programs (BV 32) | auto ms | triton ms | triton / auto |\n|---:|---:|---:|---:|---:|---:|---:|")
for B, T, H in [(1, 2048, 16), (1, 4096, 16), (1, 8192, 16), (1, 16384, 16), (1, 4096, 8), (1, 8192, 8),
                (2, 8192, 8), (1, 8192, 24), (3, 8192, 8), (1, 8192, 32)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    rn = lambda *s: torch.randn(*s, generator=g, device="cuda")
    d = dict(q=rn(B, T, H, 128).bfloat16(), k=rn(B, T, H, 128).bfloat16(), v=rn(B, T, H, 128).bfloat16(),
             g=rn(B, T, H, 128).bfloat16(), beta=rn(B, T, H).bfloat16(),
             A_log=torch.log(1 + 15 * torch.rand(H, generator=g, device="cuda")), dt_bias=0.1 * rn(H * 128))
    t = {}
    with torch.no_grad():
        for be in ("auto", "triton", "auto", "triton"):
            os.environ["TRITON_KDA_BACKEND"] = be
            t[be] = timer(lambda: chunk_kda(**d, **KIMI))[0]
    print(f"| {B} | {T} | {H} | {B * H * 4} | {t['auto']:.3f} | {t['triton']:.3f} | {t['triton'] / t['auto']:.3f} |", flush=True)
PY
cat $R/few_heads.txt

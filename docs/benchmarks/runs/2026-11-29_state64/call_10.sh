# Device call 10 (one H200): with the wgmma recurrence the default, are sm90's two hand-offs to Triton for few heads
# (N HV <= 16 over >= 4096 tokens; sequences that Triton's intra-card CP splits) still right? few_heads.py.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 200 python3 docs/benchmarks/runs/2026-11-29_state64/few_heads.py > $R/few_heads.md 2>&1; echo "rc=$?" >> $R/few_heads.md
cat $R/few_heads.md

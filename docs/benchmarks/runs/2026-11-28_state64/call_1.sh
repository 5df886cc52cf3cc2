# Device call 1 (one H200): the 64-token wgmma recurrence (backend sm90_v2) on a GPU for the first time: its tests and
# tests/test_cuda_sm90.py (the recurrence kernels' shared state load / store and wgmma helper changed), then the
# no-grad forward's kernel times in four modes (state64_times.py) at B2 T8192 H32 and B1 T8192 H96, Kimi flags.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs -x tests/test_cuda_sm90_v2.py tests/test_cuda_sm90.py \
  > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt
timeout 300 python3 docs/benchmarks/runs/2026-11-28_state64/state64_times.py > $R/times.txt 2>&1; echo "rc=$?" >> $R/times.txt
grep -E "^FAILED|^ERROR|passed|failed|rc=|Error|assert" $R/pytest.txt | cut -c1-400 | head -30
grep -E " us;| us  |rc=|Error" $R/times.txt | grep -v "^ *[0-9.]* us  *[a-z]*(void at::\|elementwise\|vectorized" | cut -c1-160 | head -60

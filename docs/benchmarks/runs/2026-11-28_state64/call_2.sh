# Device call 2 (one H200): the 64-token recurrence with 2 and 3 chunks in flight (KDA_STATE64_STAGES, through
# TRITON_KDA_NVCC_FLAGS: its own library in the build cache): sm90_v2's GPU tests with 3, then the no-grad forward's
# kernel times of sm90_v2 (2 and 3 stages) and Triton at B2 T8192 H32 and B1 T8192 H96, Kimi flags.
# Carried: .cuda_cache (this tree's library with 2 and with 3 stages, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
S=docs/benchmarks/runs/2026-11-28_state64/state64_times.py
timeout 150 python3 $S --modes sm90_v2,triton > $R/times_2stages.txt 2>&1; echo "rc=$?" >> $R/times_2stages.txt
export TRITON_KDA_NVCC_FLAGS="-DKDA_STATE64_STAGES=3"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_v2.py > $R/pytest_3stages.txt 2>&1
echo "rc=$?" >> $R/pytest_3stages.txt
timeout 150 python3 $S --modes sm90_v2 > $R/times_3stages.txt 2>&1; echo "rc=$?" >> $R/times_3stages.txt
grep -E "^FAILED|passed|failed|rc=" $R/pytest_3stages.txt | cut -c1-300
for f in times_2stages times_3stages; do echo "== $f"; grep -E " us;|_kernel|rc=|Error" $R/$f.txt | cut -c1-140; done

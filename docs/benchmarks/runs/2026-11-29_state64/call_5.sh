# Device call 5 (one H200): the 16-token wgmma recurrence (TRITON_KDA_SM90_STATE=wgmma) with [w ; qg] and kg in the
# same 128-byte swizzled layouts: GPU tests of both compiled forwards, then kernel and forward times of the default
# (mma.sync) and the wgmma recurrence at three shapes (2026-11-28_state64/state64_times.py).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
timeout 150 python3 docs/benchmarks/runs/2026-11-28_state64/state64_times.py --shapes B2-T8192-H32,B1-T8192-H96,B4-T4096-H16 \
    --modes sm90,sm90-wgmma16,sm90_v2 > $R/times.txt 2>&1; echo "rc=$?" >> $R/times.txt
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest.txt | cut -c1-300
grep -E " us;| us  |rc=|Error" $R/times.txt | cut -c1-110

# Device call 4 (one H200): the 64-token recurrence with two consumer warpgroups per CTA (a CTA per head, the w / qg /
# kg / Aqk tiles loaded once for both 64-column halves; -DKDA_STATE64_WGS=2 through TRITON_KDA_NVCC_FLAGS, 2 stages)
# against one (3 stages): sm90_v2's GPU tests with two, then its kernel time at B2 T8192 H32 and B1 T8192 H96 with each.
# Carried: .cuda_cache (this tree's library with one and with two warpgroups, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
S=docs/benchmarks/runs/2026-11-28_state64/state64_times.py
timeout 50 python3 $S --modes sm90_v2 > $R/times_1wg.txt 2>&1; echo "rc=$?" >> $R/times_1wg.txt
export TRITON_KDA_NVCC_FLAGS="-DKDA_STATE64_WGS=2"
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs -x tests/test_cuda_sm90_v2.py > $R/pytest_2wg.txt 2>&1
echo "rc=$?" >> $R/pytest_2wg.txt
timeout 50 python3 $S --modes sm90_v2 > $R/times_2wg.txt 2>&1; echo "rc=$?" >> $R/times_2wg.txt
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest_2wg.txt | cut -c1-300
for f in times_1wg times_2wg; do echo "== $f"; grep -E " us;|state64|rc=|Error" $R/$f.txt | cut -c1-110; done

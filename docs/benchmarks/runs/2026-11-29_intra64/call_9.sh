# Device call 9 (one H200): call 8's helpers with q and k loaded in one loop again (rows_async<PAIR>): the 16-token
# kernel's SASS byte-identical to b66a631's for the pre-gated and lower-bound gates (reordered for softplus), the 64-token
# kernel's rescheduled: sm90's and sm90_v2's GPU tests, and intra64_bench.py (the default forward's time against
# calls 1-6: 754-759 us at B2 T8192 H32, 1073-1075 at B1 T8192 H96; the 64-token kernel's against call 4's 795 / 1172).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_intra64
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py tests/test_cuda_sm90_v2.py \
  > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt
grep -E "^FAILED|^E  |passed|failed|rc=" $R/pytest.txt | cut -c1-400 | head -30
timeout 100 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

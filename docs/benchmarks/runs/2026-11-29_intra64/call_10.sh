# Device call 10 (one H200): the 16-token wgmma recurrence at 168 registers (-DKDA_K2W_MIN_BLOCKS=3, 56 bytes of
# spills; 254 by default), the step design.md's milestone 5 needs: the default forward's time with each library
# (intra64_bench.py; the recurrence is the forward's second kernel), and sm90's GPU tests with the 168-register one.
# Carried: .cuda_cache (this tree's two libraries, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_intra64
timeout 70 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
export TRITON_KDA_NVCC_FLAGS=-DKDA_K2W_MIN_BLOCKS=3
timeout 70 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 > $R/bench_k2w3.txt 2>&1
echo "rc=$?" >> $R/bench_k2w3.txt; cat $R/bench_k2w3.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py > $R/pytest_k2w3.txt 2>&1
echo "rc=$?" >> $R/pytest_k2w3.txt; grep -E "^FAILED|passed|failed|rc=" $R/pytest_k2w3.txt | cut -c1-300

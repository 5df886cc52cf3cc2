# Device call 1 (one H200): the pipelined compiled forward at 1-16 pieces, with the recurrence at 254 registers (the
# default build) and at 168 (-DKDA_K2W_MIN_BLOCKS=3: one recurrence and two intra CTAs an SM); then the pieces'
# GPU tests. Carried: .cuda_cache (this tree's two libraries, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 120 python3 $D/pieces_bench.py > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
TRITON_KDA_NVCC_FLAGS=-DKDA_K2W_MIN_BLOCKS=3 timeout 120 python3 $D/pieces_bench.py > $R/bench_k2w3.txt 2>&1
echo "rc=$?" >> $R/bench_k2w3.txt; cat $R/bench_k2w3.txt
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300

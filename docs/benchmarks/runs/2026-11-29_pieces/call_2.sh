# Device call 2 (one H200): the pipelined forward where the recurrence leaves SMs free (N HV D / 64 CTAs at most
# half the SMs): B1 with 8-32 heads, 1-8 pieces, default build; then the CUDA-graph test again (call 1's failure was
# the test's: it did not refresh A_log and dt_bias between replays). Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 150 python3 $D/pieces_bench.py --shapes B1-T8192-H32,B1-T8192-H16,B1-T8192-H8,B1-T4096-H32,B2-T4096-H16,B1-T4096-H16 --pieces 1,2,3,4,6,8 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py -k "pieces" > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300

# Device call 11 (one H200): the default taper (1.5 over 2 pieces, 1.2 over more, where the recurrence takes at most
# half the SMs): sm90's GPU tests, then B1 T16384 H32 at 4 equal pieces against the default's 4 tapered ones (a row
# call 10 did not time). Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300
timeout 60 python3 $D/pieces_bench.py --shapes B1-T16384-H32 --pieces 1,4@1,4 --repeat 3 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

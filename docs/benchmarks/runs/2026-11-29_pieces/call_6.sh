# Device call 6 (one H200; the tree at 01a78dd, whose pieces_bench.py has mode "side"): the two kernels side by side
# on per-chunk flags (TRITON_KDA_SM90_SIDE=1): the pieces and side-by-side GPU tests first (bit-identical to one piece, oracle, CUDA graphs; a timeout guards against a hang),
# then 1 / 2 / 3 pieces and side by side timed in turn three times. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py -k "pieces or side" -x > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=|Error" $R/pytest.txt | head -20 | cut -c1-300
timeout 200 python3 $D/pieces_bench.py --shapes B1-T8192-H32,B1-T8192-H16,B2-T8192-H32,B2-T8192-H16-HV32,B1-T8192-H8,B1-T8192-H64 \
  --pieces 1,2,3,side --repeat 3 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

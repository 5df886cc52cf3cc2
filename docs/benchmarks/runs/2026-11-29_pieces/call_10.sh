# Device call 10 (one H200): tapered pieces (each piece's size r times the one before it, TRITON_KDA_SM90_TAPER): the
# pieces' GPU tests with equal and tapered pieces, then counts @ tapers timed in turn three times. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py -k "pieces" > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300
(timeout 100 python3 $D/pieces_bench.py --shapes B2-T8192-H32,B2-T8192-H16-HV32 --pieces 1,3,3@0.7,3@0.5,4@0.5,4@0.6 --repeat 3
 timeout 100 python3 $D/pieces_bench.py --shapes B1-T8192-H32,B1-T32768-H32 --pieces 1,2,2@1.5,2@0.67,8,8@1.2,8@0.85 --repeat 3
) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

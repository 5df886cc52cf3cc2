# Device call 8 (one H200, 85d11ed): more pieces over longer sequences where the recurrence takes at most half the
# SMs (the default gives 2): 2-8 pieces timed in turn three times. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 250 python3 $D/pieces_bench.py --shapes B1-T32768-H32,B1-T16384-H32,B2-T16384-H16,B1-T8192-H32,B1-T8192-H16 \
  --pieces 1,2,3,4,6,8 --repeat 3 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

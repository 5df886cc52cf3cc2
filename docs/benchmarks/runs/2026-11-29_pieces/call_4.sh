# Device call 4 (one H200): call 3 timed B1 T8192 H16 at 2 pieces 514.8 us where call 2 had 398.9: each piece
# count timed in turn five times on the rows the default changes (and B2 T8192 H32, which it keeps at one piece).
# Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 200 python3 $D/pieces_bench.py --shapes B1-T8192-H16,B1-T8192-H32,B1-T4096-H32,B2-T4096-H16,B1-T4096-H16,B1-T8192-H8,B2-T8192-H32 \
  --pieces 1,2,3 --repeat 5 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

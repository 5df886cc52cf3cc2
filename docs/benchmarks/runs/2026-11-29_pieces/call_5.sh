# Device call 5 (one H200): call 4 timed B2 T8192 H32 (128 recurrence CTAs, one piece by default) at 3 pieces 753 us
# against 770 at one: 1-4 pieces timed in turn three times on the rows whose recurrence takes more than half the SMs.
# Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_pieces
timeout 250 python3 $D/pieces_bench.py --shapes B2-T8192-H32,B1-T8192-H96,B2-T8192-H16-HV32,B8-T2048-H32,B2-T8192-H64,B4-T4096-H32 \
  --pieces 1,2,3,4 --repeat 3 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

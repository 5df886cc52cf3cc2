# Device call 6 (one H200): the kernel of call 4 (b66a631) on few heads over long sequences, where the 64-token
# recurrence's quarter of the dependent steps could pay: intra64_bench.py (the default dispatch, which hands split
# sequences past 8192 tokens to Triton, against TRITON_KDA_SM90_FWD=v2).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_intra64
timeout 250 python3 $D/intra64_bench.py \
  --shapes B1-T8192-H8,B1-T16384-H8,B1-T32768-H8,B1-T65536-H8,B1-T16384-H4,B1-T32768-H2,B1-T8192-H16,B1-T32768-H16 \
  > $R/bench.txt 2>&1; echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

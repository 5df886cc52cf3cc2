# Device call 4 (one H200): call 3's A/B again after env_bench.py's mend (in call 3 TRITON_KDA_SM90_LONGEST_FIRST=0
# of the first setting stayed set for the others, so every row there ran in sequence order). Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
(timeout 100 python3 $D/env_bench.py --shapes varlen-skewed,varlen-rand20 \
   --envs "TRITON_KDA_SM90_LONGEST_FIRST=0;TRITON_KDA_SM90_ALONE=0;TRITON_KDA_SM90_ALONE=1;TRITON_KDA_SM90_ALONE=2" --repeat 3
 TRITON_KDA_SM90_PIECES=1 timeout 60 python3 $D/kernel_times.py --batches 8192+128x64) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

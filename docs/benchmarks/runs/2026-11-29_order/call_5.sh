# Device call 5 (one H200), an experiment: the skewed batch's recurrence as two launches in turn on one stream (the
# longest sequence's CTAs alone on the card, then the short ones': TRITON_KDA_SM90_ALONE=s1, code not kept), against
# one launch and against the side-by-side launches of `alone`. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
(timeout 100 python3 $D/env_bench.py --shapes varlen-skewed \
   --envs "TRITON_KDA_SM90_ALONE=0;TRITON_KDA_SM90_ALONE=1;TRITON_KDA_SM90_ALONE=s1" --repeat 3
 for A in 0 s1; do TRITON_KDA_SM90_ALONE=$A TRITON_KDA_SM90_PIECES=1 timeout 60 python3 $D/kernel_times.py --batches 8192+128x64; done
) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

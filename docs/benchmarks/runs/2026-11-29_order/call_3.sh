# Device call 3 (one H200): the longest sequences' recurrence CTAs each alone on an SM (`sm90.alone`, a launch of
# their own on the second stream): the GPU tests of the order and of alone, then env_bench.py A/B (three alternating
# timings) and each kernel's device time in the skewed batch. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs tests/test_cuda_sm90.py -k "longest or alone or pieces or oracle" \
  > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=|AssertionError" $R/pytest.txt | cut -c1-300
(timeout 100 python3 $D/env_bench.py --shapes varlen-skewed,varlen-rand20 \
   --envs "TRITON_KDA_SM90_LONGEST_FIRST=0;TRITON_KDA_SM90_ALONE=0;TRITON_KDA_SM90_ALONE=1;TRITON_KDA_SM90_ALONE=2" --repeat 3
 TRITON_KDA_SM90_PIECES=1 timeout 60 python3 $D/kernel_times.py --batches 8192+128x64) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

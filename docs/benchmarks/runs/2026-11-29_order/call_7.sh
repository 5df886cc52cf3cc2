# Device call 7 (one H200): the two varlen rows whose times moved most between benchmarks.run calls (rand20, TLE's
# batch with GVA H16 HV32), sequence order against longest first, five alternating timings. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
timeout 200 python3 $D/env_bench.py --shapes varlen-rand20,varlen-tle6-B1-T8192-H16,varlen-tle6-B1-T8192-H96 \
   --envs "TRITON_KDA_SM90_LONGEST_FIRST=0;TRITON_KDA_SM90_LONGEST_FIRST=1" --repeat 5 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

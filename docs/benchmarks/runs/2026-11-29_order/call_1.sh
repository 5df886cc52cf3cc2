# Device call 1 (one H200): the recurrence's CTAs longest sequence first (`sm90.longest_first`) and the sm90_split
# backend (compiled 64-token intra stage before Triton's split state pass): (1) their GPU tests and sm90's; (2)
# env_bench.py A/B in one process, three alternating timings; (3) benchmarks.run --impl auto,fla --modes fwd over the
# long, varlen and prefill suites (fla's tuning carried).
# Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs tests/test_cuda_sm90.py tests/test_cuda_sm90_split.py \
  tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300
(timeout 120 python3 $D/env_bench.py --shapes varlen-skewed,varlen-rand20,varlen-uniform10,varlen-tle6-B1-T8192-H96,varlen-tle6-B1-T8192-H16 \
   --envs "TRITON_KDA_SM90_LONGEST_FIRST=0;TRITON_KDA_SM90_LONGEST_FIRST=1" --repeat 3
 timeout 150 python3 $D/env_bench.py --shapes B1-T32768-H8,B1-T65536-H8,B1-T131072-H8 \
   --envs "TRITON_KDA_SM90_SPLIT=0;TRITON_KDA_SM90_SPLIT=1" --repeat 3) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
RESTORE="from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(export TRITON_CACHE_DIR=/tmp/tcr; python3 -c "$RESTORE"
 timeout 200 python3 -m benchmarks.run --suite long,varlen,prefill --impl auto,fla --modes fwd --flags kimi \
   --tune-cache benchmarks/fla_tune --rep-ms 100 --out $R/fwd > $R/fwd_log.txt 2>&1; echo "rc=$?" >> $R/fwd_log.txt)
tail -30 $R/fwd_log.txt | cut -c1-250

# Device call 9 (one H200): pieces of about 4096 tokens where the recurrence takes at most half the SMs (the rule
# after call 8): benchmarks.run --impl auto,fla --modes fwd over the kimi and standard suites (fla's tuning carried),
# then sm90's GPU tests. Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
RESTORE="from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(export TRITON_CACHE_DIR=/tmp/tcr; python3 -c "$RESTORE"
 timeout 200 python3 -m benchmarks.run --suite kimi,standard --impl auto,fla --modes fwd --flags kimi \
   --tune-cache benchmarks/fla_tune --rep-ms 100 --out $R/fwd > $R/fwd_log.txt 2>&1; echo "rc=$?" >> $R/fwd_log.txt)
tail -2 $R/fwd_log.txt
(export TRITON_CACHE_DIR=/tmp/tct
 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py > $R/pytest.txt 2>&1
 echo "rc=$?" >> $R/pytest.txt)
grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/pytest.txt | cut -c1-300

# Device call 6 (one H200, HEAD: longest first and sm90_split): (1) benchmarks.run --impl auto,fla --modes fwd over
# the standard, kimi, long, gva, varlen and prefill suites (fla's tuning carried); (2) pytest -m gpu over tests/ (three
# jobs side by side, as 2026-11-29_pieces/call_7.sh).
# Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
RESTORE="from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(export TRITON_CACHE_DIR=/tmp/tcr; python3 -c "$RESTORE"
 timeout 230 python3 -m benchmarks.run --suite standard,kimi,long,gva,varlen,prefill --impl auto,fla --modes fwd --flags kimi \
   --tune-cache benchmarks/fla_tune --rep-ms 100 --out $R/fwd > $R/fwd_log.txt 2>&1; echo "rc=$?" >> $R/fwd_log.txt)
grep -E "auto fwd|rc=" $R/fwd_log.txt | cut -c1-200
export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs --durations=5"
(export TRITON_CACHE_DIR=/tmp/tc0; python3 -c "$RESTORE"
 timeout 240 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt) &
(export TRITON_CACHE_DIR=/tmp/tc1; python3 -c "$RESTORE"
 timeout 240 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and bfloat16" > $R/pytest_regimes_bf16.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes_bf16.txt) &
(export TRITON_CACHE_DIR=/tmp/tc2; python3 -c "$RESTORE"
 timeout 240 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and float16 and not bfloat16" \
   > $R/pytest_regimes_fp16.txt 2>&1; echo "rc=$?" >> $R/pytest_regimes_fp16.txt) &
wait
for f in pytest_rest pytest_regimes_bf16 pytest_regimes_fp16; do echo "== $f"; grep -E "^FAILED|^ERROR|^SKIPPED|passed|failed|rc=" $R/$f.txt | cut -c1-300; done

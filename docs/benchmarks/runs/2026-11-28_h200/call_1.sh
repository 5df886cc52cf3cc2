# Device call 1 (2 GPUs). GPU 0: the wheel check (call.sh), then the gate-regime sweep over 32 seeds, fp16 rows first
# (per-seed sums kept, so that 8-seed subsets pool again). GPU 1: kda-check --full.
# Carried: dist/ (the wheel), .cuda_cache (nvcc 13.0, sm_90a), .whl (fla-core 0.6.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
python3 -c "import sys; sys.path[:0]=['/tmp/site','.']; from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(export CUDA_VISIBLE_DEVICES=0
 timeout 150 bash docs/benchmarks/runs/2026-11-28_h200/call.sh > $R/wheel.log 2>&1; echo "rc=$?" >> $R/wheel.log
 PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache timeout 400 python3 -m benchmarks.gate_regimes \
   --dtypes fp16,bf16 --seeds 32 --out $R/regimes > $R/regimes.log 2>&1; echo "rc=$?" >> $R/regimes.log) &
(export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
 timeout 540 python3 -m triton_kda.check.cli --full --jobs 8 --out $R/check > $R/check.log 2>&1; echo "rc=$?" >> $R/check.log) &
wait
for f in wheel.log regimes.log check.log; do echo "== $f"; tail -12 $R/$f | cut -c1-300; done
cp -r $OUT/wheel $R/ 2>/dev/null; cd $OUT && tar czf r.tgz r && rm -rf r wheel

# Device call 3 (2 GPUs): every GPU test over tests/ (`pytest -m gpu`): GPU 0 all but the gate-regime sweep, GPU 1 the
# wheel check (call.sh) then the gate-regime sweep (32 seeds). Carried: dist/, .cuda_cache, .whl (fla-core 0.6.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs"
(export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc0 TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
 timeout 480 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt) &
(export CUDA_VISIBLE_DEVICES=1
 timeout 100 bash docs/benchmarks/runs/2026-11-28_h200/call.sh > $R/wheel.log 2>&1; echo "rc=$?" >> $R/wheel.log
 export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc1 TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
 timeout 380 $PT tests/test_vs_fla.py -k test_gate_regime_no_worse_than_fla > $R/pytest_regimes.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes.txt) &
wait
cat $R/wheel.log | cut -c1-250
for f in pytest_rest pytest_regimes; do echo "== $f"; grep -E "^FAILED|^SKIPPED|^ERROR|passed|failed|rc=" $R/$f.txt | cut -c1-300; done
cp -r $OUT/wheel $R/ 2>/dev/null; cd $OUT && tar czf r.tgz r && rm -rf r wheel

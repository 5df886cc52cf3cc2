# Device call 4 (2 GPUs): call_3's GPU tests again with fla's tuning restored first (call 3 ran without it: fla
# autotuned in every pytest worker and both halves ran out of time). GPU 0: every GPU test but the gate-regime sweep;
# GPU 1: the sweep (32 seeds). Carried: .cuda_cache, .whl (fla-core 0.6.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs"
(export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc0
 timeout 330 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt) &
(export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/tc1
 timeout 330 $PT tests/test_vs_fla.py -k test_gate_regime_no_worse_than_fla > $R/pytest_regimes.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes.txt) &
wait
for f in pytest_rest pytest_regimes; do echo "== $f"; grep -E "^FAILED|^SKIPPED|^ERROR|passed|failed|rc=" $R/$f.txt | cut -c1-300; done
cd $OUT && tar czf r.tgz r && rm -rf r

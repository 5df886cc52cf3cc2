# Device call 3 (4 GPUs), the tree of call 2: every GPU test over tests/ again, fla's tuning restored into each job's
# own Triton cache (calls 1 and 2 restored it into the default cache while the jobs used TRITON_CACHE_DIR=/tmp/tcN, so
# fla autotuned in every pytest worker and no job ended in 540 s). GPU 0: all but the gate-regime test; GPU 1: its
# bf16 rows, GPU 2: its fp16 rows (32 seeds each).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
RESTORE="from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs --durations=5"
(export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc0; python3 -c "$RESTORE"
 timeout 440 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt) &
(export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/tc1; python3 -c "$RESTORE"
 timeout 440 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and bfloat16" > $R/pytest_regimes_bf16.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes_bf16.txt) &
(export CUDA_VISIBLE_DEVICES=2 TRITON_CACHE_DIR=/tmp/tc2; python3 -c "$RESTORE"
 timeout 440 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and float16 and not bfloat16" \
   > $R/pytest_regimes_fp16.txt 2>&1; echo "rc=$?" >> $R/pytest_regimes_fp16.txt) &
wait
for f in pytest_rest pytest_regimes_bf16 pytest_regimes_fp16; do echo "== $f"; grep -E "^FAILED|^ERROR|^SKIPPED|passed|failed|rc=|s call " $R/$f.txt | cut -c1-300; done
cd $OUT && tar czf r.tgz r && rm -rf r

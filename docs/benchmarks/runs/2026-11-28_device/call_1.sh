# Device call 1 (4 GPUs side by side), code of main 5ca04ae. GPU 0: every GPU test but the gate-regime sweep, then
# fwd+bwd against f6ea3e7 (benchmarks.ab, bf16 and fp32), then the fp32 roofline. GPU 1: the gate-regime test
# (32 seeds). GPU 2: kda-check --full. GPU 3: the wip/wgmma-state branch (.wgmma): its sm90 GPU tests, then the
# no-grad forward's kernel times with the recurrence on mma.sync and on wgmma (state_times.py).
# Carried: .whl (fla-core 0.6.0), .cuda_cache (main, nvcc 13.0, sm_90a), .ab_base (f6ea3e7's tree), .wgmma (the
# branch's tree with its own .cuda_cache).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs"
(export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc0
 timeout 250 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt
 timeout 200 python3 -m benchmarks.ab --base .ab_base --shapes B2-T8192-H32,B2-T8192-H32-fp32 --flags kimi --rounds 2 \
   --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt
 timeout 90 python3 -m benchmarks.roofline --dtype fp32 > $R/roofline_fp32.txt 2>&1; echo "rc=$?" >> $R/roofline_fp32.txt) &
(export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/tc1
 timeout 540 $PT tests/test_vs_fla.py -k test_gate_regime_no_worse_than_fla > $R/pytest_regimes.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes.txt) &
(export CUDA_VISIBLE_DEVICES=2 TRITON_CACHE_DIR=/tmp/tc2
 timeout 540 python3 -m triton_kda.check.cli --full --jobs 8 --out $R/check > $R/check.log 2>&1; echo "rc=$?" >> $R/check.log) &
(export CUDA_VISIBLE_DEVICES=3 TRITON_CACHE_DIR=/tmp/tc3; cd .wgmma
 export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py > $R/wgmma_pytest.txt 2>&1
 echo "rc=$?" >> $R/wgmma_pytest.txt
 timeout 240 python3 ../docs/benchmarks/runs/2026-11-28_device/state_times.py > $R/wgmma_times.txt 2>&1
 echo "rc=$?" >> $R/wgmma_times.txt) &
wait
for f in pytest_rest.txt pytest_regimes.txt wgmma_pytest.txt; do echo "== $f"; grep -E "^FAILED|^ERROR|passed|failed|rc=" $R/$f | cut -c1-300; done
echo "== ab"; tail -8 $R/ab.txt; echo "== roofline"; tail -3 $R/roofline_fp32.txt | cut -c1-300
echo "== check"; tail -6 $R/check.log | cut -c1-300
echo "== wgmma times"; grep -E " us;|rc=|Error" $R/wgmma_times.txt | cut -c1-200
cd $OUT && tar czf r.tgz r && rm -rf r

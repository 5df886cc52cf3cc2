# Device call 2 (4 GPUs side by side), main 5ca04ae with wip/wgmma-state merged (the wgmma recurrence behind
# TRITON_KDA_SM90_STATE=wgmma, off by default). Every GPU test over tests/, split over three GPUs; each job limited
# to 4 CPU threads (call 1's jobs oversubscribed the host's cores: the gate-regime test ended 4 of its 16 rows in
# 540 s, against 15 in 330 s on 2026-11-28's two-GPU call). GPU 3: the fp32 training step's kernels against their
# floors for f6ea3e7 (.ab_base) then this tree (benchmarks.roofline --dtype fp32), one process each.
# Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's and f6ea3e7's libraries, nvcc 13.0, sm_90a), .ab_base.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
PT="python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs"
(export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc0
 timeout 540 $PT tests/ -k "not test_gate_regime_no_worse_than_fla" > $R/pytest_rest.txt 2>&1; echo "rc=$?" >> $R/pytest_rest.txt) &
(export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/tc1
 timeout 540 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and bfloat16" > $R/pytest_regimes_bf16.txt 2>&1
 echo "rc=$?" >> $R/pytest_regimes_bf16.txt) &
(export CUDA_VISIBLE_DEVICES=2 TRITON_CACHE_DIR=/tmp/tc2
 timeout 540 $PT tests/test_vs_fla.py -k "test_gate_regime_no_worse_than_fla and float16 and not bfloat16" \
   > $R/pytest_regimes_fp16.txt 2>&1; echo "rc=$?" >> $R/pytest_regimes_fp16.txt) &
(export CUDA_VISIBLE_DEVICES=3 TRITON_CACHE_DIR=/tmp/tc3
 (cd .ab_base && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m benchmarks.roofline --dtype fp32) > $R/roofline_fp32_base.txt 2>&1
 echo "rc=$?" >> $R/roofline_fp32_base.txt
 timeout 200 python3 -m benchmarks.roofline --dtype fp32 > $R/roofline_fp32_head.txt 2>&1; echo "rc=$?" >> $R/roofline_fp32_head.txt) &
wait
for f in pytest_rest pytest_regimes_bf16 pytest_regimes_fp16; do echo "== $f"; grep -E "^FAILED|^ERROR|^SKIPPED|passed|failed|rc=" $R/$f.txt | cut -c1-300; done
for f in roofline_fp32_base roofline_fp32_head; do echo "== $f"; grep -E "^\| (head|base) \| _|summary|rc=" $R/$f.txt | cut -c1-120; done
cd $OUT && tar czf r.tgz r && rm -rf r

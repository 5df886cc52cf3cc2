# One device call on a 4-GPU machine: the gate-regime sweep before (.base, the commit before the split for the
# lower-bound gate) and after, the GPU tests against fla, the fwd+bwd cost (benchmarks.ab), kda-check --full's bf16
# rows with fla. Carried: .whl (fla-core 0.6.0, einops), .base (git archive of the base commit), .cuda_cache
# (cuda_fast built for sm_90a on the CPU machine, both trees), .tune (fla's tuning of earlier runs).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
W=$PWD R=$OUT/r; mkdir -p $R /tmp/b
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('.tune')), 'tuning files')"
cp -r .base/triton_kda .base/cuda_fast /tmp/b && cp -r reference benchmarks tests setup.cfg /tmp/b
timeout 150 python3 -m benchmarks.fla_prewarm --gate-regimes bf16,fp16 --workers 24 --budget-s 140 > $R/prewarm.txt 2>&1
tail -1 $R/prewarm.txt
G="python3 -m benchmarks.gate_regimes"
(export CUDA_VISIBLE_DEVICES=0; timeout 380 $G --out $R/after > $R/after.log 2>&1; echo "rc=$?" >> $R/after.log) &
(export CUDA_VISIBLE_DEVICES=1; timeout 380 python3 -m pytest -q -p no:cacheprovider tests/test_vs_fla.py \
  tests/test_cuda_sm90_bwd.py > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt) &
(export CUDA_VISIBLE_DEVICES=2; cd /tmp/b && PYTHONPATH=/tmp/site:/tmp/b timeout 190 $G --dtypes bf16 --out $R/before \
  > $R/before.log 2>&1; echo "rc=$?" >> $R/before.log; cd $W
 timeout 185 python3 -m benchmarks.ab --base .base --flags kimi,pregated --rounds 3 --out $R/ab > $R/ab.txt 2>&1
 echo "rc=$?" >> $R/ab.txt) &
(export CUDA_VISIBLE_DEVICES=3; timeout 380 python3 -m triton_kda.check.cli --full --filter -bf16 --jobs 8 \
  --out $R/chk16 > $R/chk16.log 2>&1; echo "rc=$?" >> $R/chk16.log) &
wait
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; print(save(Path('$R/tune')), 'saved')"
for f in after.log before.log pytest.txt ab.txt chk16.log; do echo "== $f"; tail -5 $R/$f; done
cd $OUT && tar czf r.tgz r && rm -rf r

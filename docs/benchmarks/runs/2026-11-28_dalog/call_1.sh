# Device call 1 (2 GPUs): GPU 0 the gate-regime sweep (8 seeds, both backwards, fla) then the GPU tests but that sweep's
# test; GPU 1 kda-check --full (fla on the bf16 gate-in-kernel rows) then fwd+bwd against f6ea3e7 (benchmarks.ab).
# Carried: .whl (fla-core 0.6.0), .ab_base (git worktree of f6ea3e7), .cuda_cache (cuda_fast for sm_90a, nvcc 13.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short | head -30 >> $R/commit.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(export CUDA_VISIBLE_DEVICES=0
 timeout 330 python3 -m benchmarks.gate_regimes --out $R/regimes > $R/regimes.log 2>&1; echo "rc=$?" >> $R/regimes.log
 timeout 230 python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider tests/ -k "not test_gate_regime_no_worse_than_fla" \
   > $R/pytest_gpu.txt 2>&1; echo "rc=$?" >> $R/pytest_gpu.txt) &
(export CUDA_VISIBLE_DEVICES=1
 timeout 400 python3 -m triton_kda.check.cli --full --jobs 8 --out $R/check > $R/check.log 2>&1; echo "rc=$?" >> $R/check.log
 timeout 160 python3 -m benchmarks.ab --base .ab_base --shapes B2-T8192-H32,B2-T8192-H32-fp32 --flags kimi --rounds 2 \
   --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt) &
wait
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; print(save(Path('$R/tune')), 'saved')"
for f in regimes.log pytest_gpu.txt check.log ab.txt; do echo "== $f"; tail -6 $R/$f; done
cd $OUT && tar czf r.tgz r && rm -rf r

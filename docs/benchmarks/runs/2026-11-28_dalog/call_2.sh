# Device call 2 (one GPU), code of 3799637 (forward back to fp32 G): every GPU test (pytest -m gpu over tests/, the
# 8-seed gate-regime test included), then fwd+bwd against f6ea3e7 (benchmarks.ab, one round).
# Carried: .whl (fla-core 0.6.0), .ab_base (git worktree of f6ea3e7), .cuda_cache (cuda_fast for sm_90a, nvcc 13.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short | head -30 >> $R/commit.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
timeout 300 python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider tests/ > $R/pytest_gpu.txt 2>&1
echo "rc=$?" >> $R/pytest_gpu.txt
timeout 160 python3 -m benchmarks.ab --base .ab_base --shapes B2-T8192-H32,B2-T8192-H32-fp32 --flags kimi --rounds 1 \
  --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; print(save(Path('$R/tune')), 'saved')"
for f in pytest_gpu.txt ab.txt; do echo "== $f"; tail -8 $R/$f; done
grep -E "^FAILED|Error" $R/pytest_gpu.txt | head -20
cd $OUT && tar czf r.tgz r && rm -rf r

# Device call 4 (one GPU), code of 1e48eb7 (the WY backward back on an fp32 copy of G): every GPU test, fwd+bwd
# against f6ea3e7 (one round), the fp32 step's kernels (benchmarks.roofline).
# Carried: .whl (fla-core 0.6.0), .ab_base (git worktree of f6ea3e7), .cuda_cache (cuda_fast for sm_90a, nvcc 13.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short | head -30 >> $R/commit.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
timeout 230 python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider tests/ > $R/pytest_gpu.txt 2>&1
echo "rc=$?" >> $R/pytest_gpu.txt
timeout 130 python3 -m benchmarks.ab --base .ab_base --shapes B2-T8192-H32,B2-T8192-H32-fp32 --flags kimi --rounds 1 \
  --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt
timeout 40 python3 -m benchmarks.roofline --pkg new=.:triton_kda --dtype fp32 --steps 5 > $R/roof_new.txt 2>&1
for f in pytest_gpu.txt ab.txt roof_new.txt; do echo "== $f"; tail -6 $R/$f | cut -c1-300; done
grep -E "^FAILED" $R/pytest_gpu.txt | head -20
cd $OUT && tar czf r.tgz r && rm -rf r

# Device call 3 (one GPU), code of 3799637: kda-check --full with fla (background); the fp16 gate regimes over 8 seeds
# with the code of f6ea3e7 (its triton_kda in /tmp/b beside this tree's harness) and with this code; then the fp32
# step's kernels of both trees (benchmarks.roofline).
# Carried: .whl (fla-core 0.6.0), .ab_base (git worktree of f6ea3e7), .cuda_cache (cuda_fast for sm_90a, nvcc 13.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
W=$PWD R=$OUT/r; mkdir -p $R /tmp/b
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short | head -30 >> $R/commit.txt
cp -r .ab_base/triton_kda .ab_base/cuda_fast /tmp/b && cp -r reference benchmarks tests setup.cfg /tmp/b
export PYTHONPATH=/tmp/site:$W
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
(timeout 475 python3 -m triton_kda.check.cli --full --jobs 10 --out $R/check > $R/check.log 2>&1; echo "rc=$?" >> $R/check.log) &
G="python3 -m benchmarks.gate_regimes --dtypes fp16 --regimes saturated,unsaturated,masked"
(cd /tmp/b && PYTHONPATH=/tmp/site:/tmp/b timeout 200 $G --out $R/base16 > $R/base16.log 2>&1; echo "rc=$?" >> $R/base16.log)
timeout 200 $G --out $R/new16 > $R/new16.log 2>&1; echo "rc=$?" >> $R/new16.log
wait
timeout 40 python3 -m benchmarks.roofline --pkg new=.:triton_kda --dtype fp32 --steps 5 > $R/roof_new.txt 2>&1
(cd /tmp/b && PYTHONPATH=/tmp/site:/tmp/b timeout 40 python3 -m benchmarks.roofline --pkg base=/tmp/b:triton_kda --dtype fp32 \
  --steps 5 > $R/roof_base.txt 2>&1)
for f in check.log base16.log new16.log roof_new.txt roof_base.txt; do echo "== $f"; tail -5 $R/$f | cut -c1-400; done
cd $OUT && tar czf r.tgz r && rm -rf r

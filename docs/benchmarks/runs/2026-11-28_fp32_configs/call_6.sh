# Device call 6 (one H200): kda-check --full --jobs 8 at this tree (docs/check/H200_kda-check.csv).
# Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('benchmarks/fla_tune')), 'tuning files')"
timeout 560 python3 -m triton_kda.check.cli --full --jobs 8 --out $R/check > $R/check.log 2>&1; echo "rc=$?" >> $R/check.log
tail -14 $R/check.log | cut -c1-300

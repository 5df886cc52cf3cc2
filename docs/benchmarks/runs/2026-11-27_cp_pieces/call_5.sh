python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m zipfile -e .whl_layers/flash_linear_attention-0.6.0-py3-none-any.whl /tmp/site
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
# fla's KimiDeltaAttention with fla's kernels and with the plug-in (fla tunes on first use: the tuning comes back)
timeout 280 python3 -m benchmarks.stack_check --only fla --tune-cache benchmarks/fla_tune --out $R/stack > $R/stack.log 2>&1; echo "stack rc $?"
python3 -c "from pathlib import Path; from benchmarks import tune_cache; tune_cache.save(Path('benchmarks/fla_tune'))"
tar czf $R/fla_tune.tgz benchmarks/fla_tune
cat $R/stack/stack_check.md 2>/dev/null | tail -12; tail -5 $R/stack.log

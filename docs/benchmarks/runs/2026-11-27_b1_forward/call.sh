# B1 forward rows (few heads: the compiled forward runs N*HV*(128/BV) programs serially over the sequence): the
# default dispatch, the Triton path, and the Triton path with its intra-card chunk-parallel states forced on.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
timeout 200 python3 -m benchmarks.run --suite standard,kimi --shapes B1- --impl auto,triton --modes fwd --out $R/default > $R/default.txt 2>&1
grep -E "^\|.*(auto|triton)" $R/default.txt | head -20
TRITON_KDA_INTRACARD_CP=1 timeout 150 python3 -m benchmarks.run --suite standard,kimi --shapes B1- --impl triton --modes fwd --out $R/cp > $R/cp.txt 2>&1
grep -E "^\|.*triton" $R/cp.txt | head -10

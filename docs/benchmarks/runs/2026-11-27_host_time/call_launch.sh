# One H100: host time of a training step (ours only: fla left off the path) before (.base = 6956b93) and after the
# kept launchers (launch_kernel), alternating trees twice, then the GPU tests that run every launch site (bit-identical reruns, CUDA graphs).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
S=B1-T4096-H32,B1-T8192-H16,B2-T8192-H32
for i in 1 2; do
  (cd .base && PYTHONPATH=$PWD timeout 90 python3 -m benchmarks.host_time --gpu --shapes $S > $R/base_$i.txt 2>&1)
  PYTHONPATH=$PWD timeout 90 python3 -m benchmarks.host_time --gpu --shapes $S > $R/kept_$i.txt 2>&1
done
for f in base_1 kept_1 base_2 kept_2; do echo "== $f"; grep "^|" $R/$f.txt | grep -v -- "---\|shape"; done
PYTHONPATH=/tmp/site:$PWD timeout 180 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_chunk_bwd.py tests/test_cuda_graphs.py \
  tests/test_ops.py tests/test_launch.py > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt; tail -3 $R/pytest.txt

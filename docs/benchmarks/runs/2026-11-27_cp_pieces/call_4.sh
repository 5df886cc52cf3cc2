python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# this commit alone on the machine: W = 4 with every check, then W = 2 timings (its checks ran in call 3 on the same
# code path), nothing beside them
timeout 200 $TR --nproc_per_node 4 --master_port 29601 -m benchmarks.cp_dist --out $R/w4 > $R/w4.log 2>&1; echo "w4 rc $?"
CUDA_VISIBLE_DEVICES=0,1 timeout 100 $TR --nproc_per_node 2 --master_port 29602 -m benchmarks.cp_dist --timings-only --out $R/w2 > $R/w2.log 2>&1; echo "w2 rc $?"
for f in $R/w4/cp_dist.md $R/w2/cp_dist.md; do echo "== $f"; grep "^| B1.*| fwd" $f | cut -c1-100; grep -c "| pass |" $f; grep "fail\|raised" $f | head -3; done
# fla's layer (flash-linear-attention 0.6.0's fla.layers, unpacked over fla-core) if transformers is in the image
if python3 -c "import transformers; print('transformers', transformers.__version__)"; then
  python3 -m zipfile -e .whl_layers/flash_linear_attention-0.6.0-py3-none-any.whl /tmp/site
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m benchmarks.stack_check --tune-cache benchmarks/fla_tune --out $R/stack > $R/stack.log 2>&1; echo "stack rc $?"
  tail -12 $R/stack/stack_check.md
fi

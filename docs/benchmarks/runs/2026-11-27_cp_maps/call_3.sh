python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# W = 4, T = 256K: the forward map's launch (table: 4 warps, 2 stages) against 8 warps / 1 stage and 4 warps / 3
# stages, alternating, alone on the machine
for v in table 8,1 4,3 table 8,1; do
  [ "$v" = table ] && F= || F=$v
  CP_FWD=$F timeout 150 $TR --nproc_per_node 4 --master_port 2960${#v} .calls/cp_variant.py --timings-only --out $R/w4_$v > $R/w4_$v.log 2>&1
  echo "w4 $v rc $?: $(grep '^| B1' $R/w4_$v/cp_dist.md | cut -c1-90 | tr '\n' ' ')"
done
# fla's layer and a 2-layer model against fp64, with and without the plug-in (one GPU)
python3 -m zipfile -e .whl_layers/flash_linear_attention-0.6.0-py3-none-any.whl /tmp/site
CUDA_VISIBLE_DEVICES=0 timeout 330 python3 -m benchmarks.stack_check --only fla --tune-cache benchmarks/fla_tune --out $R/stack > $R/stack.log 2>&1; echo "stack rc $?"
tail -8 $R/stack/stack_check.md; tail -5 $R/stack.log

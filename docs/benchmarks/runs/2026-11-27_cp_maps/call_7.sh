python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
# W = 2, T = 256K: the forward map's launch, table (4 warps, 2 stages) against 8 warps / 1 stage, alternating
i=0
for v in table 8_1 table 8_1 table 8_1; do
  i=$((i+1)); [ "$v" = table ] && F= || F=${v/_/,}
  CUDA_VISIBLE_DEVICES=0,1 CP_FWD=$F timeout 80 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 2965$i .calls/cp_variant.py --timings-only --out $R/w2_$i > $R/w2_$i.log 2>&1
  echo "w2 $v rc $?: $(grep '^| B1.*| fwd' $R/w2_$i/cp_dist.md | cut -c1-80 | tr '\n' ' ')"
done

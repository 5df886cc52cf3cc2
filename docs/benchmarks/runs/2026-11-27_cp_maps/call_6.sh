python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
# W = 2 timings twice more (GPUs 0 and 1), nothing beside them
for i in 1 2; do
  CUDA_VISIBLE_DEVICES=0,1 timeout 110 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 2964$i -m benchmarks.cp_dist --timings-only --out $R/w2_$i > $R/w2_$i.log 2>&1
  echo "w2 $i rc $?: $(grep '^| B1.*| fwd' $R/w2_$i/cp_dist.md | cut -c1-80 | tr '\n' ' ')"
done

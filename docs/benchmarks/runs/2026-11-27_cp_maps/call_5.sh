python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# W = 4: the forward at T = 256K after T = 128K (cp_dist's order) and alone (.calls/cp_variant.py), alternating
for i in 1 2; do
  timeout 120 $TR --nproc_per_node 4 --master_port 2962$i -m benchmarks.cp_dist --timings-only --out $R/full$i > $R/full$i.log 2>&1
  echo "full $i rc $?: $(grep '^| B1.*| fwd' $R/full$i/cp_dist.md | cut -c1-80 | tr '\n' ' ')"
  timeout 100 $TR --nproc_per_node 4 --master_port 2963$i .calls/cp_variant.py --timings-only --out $R/alone$i > $R/alone$i.log 2>&1
  echo "alone $i rc $?: $(grep '^| B1.*| fwd' $R/alone$i/cp_dist.md | cut -c1-80 | tr '\n' ' ')"
done

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
# fla's CP beside ours on 4 ranks (timings only); fla's tuning restored from and kept in benchmarks/fla_tune; every
# tuning result in the Triton cache is packed at the end, also when the run is cut short
timeout 530 python3 -m torch.distributed.run --nproc_per_node 4 --master_port 29611 -m benchmarks.cp_dist --timings-only --fla --tune-cache benchmarks/fla_tune --budget-s 330 --out $R/w4_fla > $R/w4_fla.log 2>&1; echo "w4 fla rc $?"
grep -A8 "^## Timings" $R/w4_fla/cp_dist.md; grep -A8 "^## fla" $R/w4_fla/cp_dist.md; grep -i "budget\|raised" $R/w4_fla/cp_dist.md | head
cd /tmp/tc && find . -name "*.autotune.json" | tar czf $R/fla_tune.tgz -T -; ls -la $R/fla_tune.tgz

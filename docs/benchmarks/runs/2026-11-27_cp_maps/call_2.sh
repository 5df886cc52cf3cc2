python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# the map kernels with prefetched chunk loads (this commit), alone on the machine: W = 4 then W = 2, every check
timeout 210 $TR --nproc_per_node 4 --master_port 29601 -m benchmarks.cp_dist --out $R/w4 > $R/w4.log 2>&1; echo "w4 rc $?"
CUDA_VISIBLE_DEVICES=0,1 timeout 210 $TR --nproc_per_node 2 --master_port 29602 -m benchmarks.cp_dist --out $R/w2 > $R/w2.log 2>&1; echo "w2 rc $?"
for f in $R/w4/cp_dist.md $R/w2/cp_dist.md; do echo "== $f"; grep "^| B1.*| fwd" $f | cut -c1-100; grep -c "| pass |" $f; grep "fail\|raised" $f | head -3; grep -A6 "^## The coll" $f | cut -c1-150; done
# the fp16 map kernels at the table's configuration against the old kernels (GPU 0)
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 .calls/map_probe.py 131072 fp16 2>&1 | grep -v -i warn | tee $R/map_probe_fp16.txt
tail -3 $R/w2.log $R/w4.log

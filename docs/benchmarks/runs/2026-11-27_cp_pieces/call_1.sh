python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt; nvidia-smi topo -m > $R/topo.txt
TR="python3 -m torch.distributed.run"
# W = 2 side by side: pieced export maps (this commit, with the checks) on GPUs 0,1; the unsplit maps (the export as
# before, TRITON_KDA_CP_MAP_CHUNKS past every sequence) on GPUs 2,3
(CUDA_VISIBLE_DEVICES=0,1 timeout 330 $TR --nproc_per_node 2 --master_port 29501 -m benchmarks.cp_dist --out $R/w2_pieces > $R/w2_pieces.log 2>&1; echo "w2 pieces rc $?") &
(CUDA_VISIBLE_DEVICES=2,3 TRITON_KDA_CP_MAP_CHUNKS=1000000 timeout 330 $TR --nproc_per_node 2 --master_port 29502 -m benchmarks.cp_dist --timings-only --out $R/w2_whole > $R/w2_whole.log 2>&1; echo "w2 whole rc $?") &
wait
for v in pieces whole; do grep -A8 "^## Timings" $R/w2_$v/cp_dist.md; grep -A8 "^## The coll" $R/w2_$v/cp_dist.md | cut -c1-200; done
grep -A30 "^## Checks" $R/w2_pieces/cp_dist.md | head -34
timeout 110 $TR --nproc_per_node 4 --master_port 29503 -m benchmarks.cp_dist --timings-only --out $R/w4_pieces > $R/w4_pieces.log 2>&1; echo "w4 pieces rc $?"
TRITON_KDA_CP_MAP_CHUNKS=1000000 timeout 100 $TR --nproc_per_node 4 --master_port 29504 -m benchmarks.cp_dist --timings-only --out $R/w4_whole > $R/w4_whole.log 2>&1; echo "w4 whole rc $?"
for v in pieces whole; do grep -A8 "^## Timings" $R/w4_$v/cp_dist.md; grep -A10 "^## The coll" $R/w4_$v/cp_dist.md | cut -c1-200; done

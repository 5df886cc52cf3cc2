python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R; HERE=$PWD
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# base = f0b42c8's triton_kda (.ab_base, this tree's cp_dist.py) and this tree, side by side at W = 2
(CUDA_VISIBLE_DEVICES=0,1 timeout 300 $TR --nproc_per_node 2 --master_port 29501 -m benchmarks.cp_dist --fla --tune-cache benchmarks/fla_tune --budget-s 240 --out $R/w2_head > $R/w2_head.log 2>&1; echo "w2 head rc $?") &
(cd .ab_base && CUDA_VISIBLE_DEVICES=2,3 timeout 300 $TR --nproc_per_node 2 --master_port 29502 -m benchmarks.cp_dist --timings-only --out $R/w2_base > $R/w2_base.log 2>&1; echo "w2 base rc $?") &
wait
timeout 150 $TR --nproc_per_node 4 --master_port 29503 -m benchmarks.cp_dist --budget-s 120 --out $R/w4_head > $R/w4_head.log 2>&1; echo "w4 head rc $?"
(cd .ab_base && timeout 90 $TR --nproc_per_node 4 --master_port 29504 -m benchmarks.cp_dist --timings-only --out $R/w4_base > $R/w4_base.log 2>&1; echo "w4 base rc $?")
for v in w2_head w2_base w4_head w4_base; do echo "== $v"; sed -n '/^## Timings/,/^## fla/p' $R/$v/cp_dist.md | grep "^|" | cut -c1-160; done
sed -n '/^## fla/,$p' $R/w2_head/cp_dist.md | head -20
grep -c pass $R/w2_head/cp_dist.md $R/w4_head/cp_dist.md; grep -h "fail\|raised" $R/w*_head/cp_dist.md | head

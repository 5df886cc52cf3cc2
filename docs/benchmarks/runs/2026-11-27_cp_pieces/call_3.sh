python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
TR="python3 -m torch.distributed.run"
# A/B in one call: HEAD (pieces + F from the last rank's own state backward) against pieces only (.ab_pieces: HEAD with
# that rank's F from the map kernel), W = 4 once, W = 2 twice each in alternating order; stack_check beside the W = 2 runs
for round in 1; do
  timeout 100 $TR --nproc_per_node 4 --master_port 2950$round -m benchmarks.cp_dist --timings-only --out $R/w4_head_$round > $R/w4_head_$round.log 2>&1; echo "w4 head $round rc $?"
  (cd .ab_pieces && timeout 100 $TR --nproc_per_node 4 --master_port 2951$round -m benchmarks.cp_dist --timings-only --out $R/w4_pieces_$round > $R/w4_pieces_$round.log 2>&1; echo "w4 pieces $round rc $?")
done
(CUDA_VISIBLE_DEVICES=2 timeout 330 python3 -m benchmarks.stack_check --tune-cache benchmarks/fla_tune --out $R/stack > $R/stack.log 2>&1; echo "stack rc $?"; cp -r benchmarks/fla_tune $R/fla_tune_after) &
for round in 1 2; do
  (cd .ab_pieces && CUDA_VISIBLE_DEVICES=0,1 timeout 80 $TR --nproc_per_node 2 --master_port 2952$round -m benchmarks.cp_dist --timings-only --out $R/w2_pieces_$round > $R/w2_pieces_$round.log 2>&1; echo "w2 pieces $round rc $?")
  CUDA_VISIBLE_DEVICES=0,1 timeout 80 $TR --nproc_per_node 2 --master_port 2953$round -m benchmarks.cp_dist --timings-only --out $R/w2_head_$round > $R/w2_head_$round.log 2>&1; echo "w2 head $round rc $?"
done
wait
for f in $R/w*/cp_dist.md; do echo "== $f"; grep "^| B1.*| fwd" $f | cut -c1-100; done
tail -30 $R/stack/stack_check.md 2>/dev/null || tail -30 $R/stack.log

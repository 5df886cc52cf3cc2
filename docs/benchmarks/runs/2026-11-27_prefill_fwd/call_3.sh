python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee $R/gpu.txt
PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_sm90.py > $R/tests.txt 2>&1; echo "pytest rc $?"; tail -5 $R/tests.txt
for rep in 1 2; do for v in old new new3; do
  P=$PWD; F=""; [ $v = old ] && P=$PWD/.ab_base; [ $v = new3 ] && F="-DKDA_K1_MIN_BLOCKS=3"
  for s in "B2-T8192-H32" "B1-T8192-H96"; do
    echo "== $v $s"; TRITON_KDA_NVCC_FLAGS="$F" PYTHONPATH=/tmp/site:$P timeout 100 python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py $s 2>&1 | grep -v -i warn | grep -v backend
  done
done; done > $R/ab.txt 2>&1; grep -A2 "==" $R/ab.txt | grep -v "^--" | paste - - - | awk '{print $2, $3, $6, $8, $12}'
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
PYTHONPATH=/tmp/site:$PWD timeout 150 $NCU --kernel-name regex:kda_intra --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis --metrics smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_drain.ratio,smsp__average_warp_latency_issue_stalled_imc_miss.ratio,smsp__average_warp_latency_issue_stalled_tex_throttle.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py B2-T8192-H32 2>&1 | grep -v -i warn > $R/ncu.txt
grep -E "Throughput|Duration|Registers|Executed Instructions  |Cycles Per Issued|stalled" $R/ncu.txt

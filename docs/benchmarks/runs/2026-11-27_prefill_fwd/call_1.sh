python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee $R/gpu.txt
for s in "B2-T8192-H32" "B1-T8192-H96" "B1-T8192-H96 1300,547,2048,963,271,3063" "B1-T8192-H16-HV32 1300,547,2048,963,271,3063"; do
  timeout 120 python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py $s 2>&1 | grep -v -i warn
done | tee $R/kernels.txt
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --kernel-name regex:kda_ --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section InstructionStats python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py B2-T8192-H32 2>&1 | grep -v -i warn | grep -v "^    ---" > $R/ncu.txt; tail -5 $R/ncu.txt
(timeout 230 python3 -m benchmarks.fla_prewarm --suite prefill --flags kimi --workers 12 --budget-s 200 2>&1 | tail -3) 
timeout 280 python3 -m benchmarks.run --suite prefill,kimi,gva,headdim --modes fwd --impl auto,fla --flags kimi --tune-cache benchmarks/fla_tune --out $R/bench 2>&1 | grep -v -i warn | tail -40
python3 -m benchmarks.report $R/bench 2>&1 | tail -40 > $R/report.txt
tar czf $R/tune.tgz benchmarks/fla_tune

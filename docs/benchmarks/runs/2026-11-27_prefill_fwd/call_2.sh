python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee $R/gpu.txt
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -q -x tests/test_cuda_sm90.py 2>&1 | tail -4 | tee $R/tests.txt
for rep in 1 2; do for v in old new; do
  P=$PWD; [ $v = old ] && P=$PWD/.ab_base
  for s in "B2-T8192-H32" "B1-T8192-H96"; do
    echo "== $v $s"; PYTHONPATH=/tmp/site:$P timeout 100 python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py $s 2>&1 | grep -v -i warn | grep -v backend
  done
done; done | tee $R/ab.txt
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
PYTHONPATH=/tmp/site:$PWD timeout 150 $NCU --kernel-name regex:kda_intra --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py B2-T8192-H32 2>&1 | grep -v -i warn > $R/ncu.txt
grep -E "Throughput|Duration|Registers|Executed Instructions  |Cycles Per Issued" $R/ncu.txt

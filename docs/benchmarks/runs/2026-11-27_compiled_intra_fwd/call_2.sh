python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache_all PYTHONUNBUFFERED=1
which ncu nsys nvcc; ls /usr/local/cuda*/bin 2>/dev/null | head -30
timeout 200 python3 docs/benchmarks/runs/2026-11-27_compiled_intra_fwd/probe_intra.py 2>&1 | grep -v -i warn
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 200 $NCU --kernel-name regex:kda_intra_aux --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis python3 docs/benchmarks/runs/2026-11-27_compiled_intra_fwd/probe_intra.py kimi 2>&1 | grep -v -i warn | tail -120
fi

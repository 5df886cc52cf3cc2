# Device call 3 (one H200): the gate kernels' variants with fp16 and bf16 inputs (the Triton gate cumsum runs there
# where no compiled backward takes the call: fp16 always).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache
R=$OUT/r; mkdir -p $R
for dt in fp16 bf16; do
  timeout 150 python3 docs/benchmarks/runs/2026-11-28_fp32_configs/config_sweep.py --only gate --dtype $dt > $R/sweep_gate_$dt.txt 2>&1
  echo "rc=$?" >> $R/sweep_gate_$dt.txt; grep -v Warning $R/sweep_gate_$dt.txt | cut -c1-250
done

# Device call 2 (one H200): config_sweep.py --only gate (call 1 stopped at the first gate variant).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 200 python3 docs/benchmarks/runs/2026-11-28_fp32_configs/config_sweep.py --only gate > $R/sweep_gate.txt 2>&1
echo "rc=$?" >> $R/sweep_gate.txt; grep -v Warning $R/sweep_gate.txt | cut -c1-250

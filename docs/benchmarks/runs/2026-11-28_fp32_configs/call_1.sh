# Device call 1 (one H200): config_sweep.py in two halves one after the other (fp32 B2 T8192 H32, Kimi flags), code
# of main 9c9080a. Nothing carried (fp32 steps run Triton only).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
S=docs/benchmarks/runs/2026-11-28_fp32_configs/config_sweep.py
for p in 0 1; do
  timeout 270 python3 $S --part $p --parts 2 > $R/sweep_$p.txt 2>&1; echo "rc=$?" >> $R/sweep_$p.txt
done
cat $R/gpu.txt $R/sweep_0.txt $R/sweep_1.txt | grep -v Warning | cut -c1-250

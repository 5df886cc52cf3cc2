# First call (one GPU): per-kernel times of the bf16 fwd+bwd step against their memory floors at K = V = 128 and
# 256 (HEAD's code), and the state passes' launch sweep.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; D=docs/benchmarks/runs/2026-11-27_training_step
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
S=docs/benchmarks/scripts
timeout 200 python3 $S/kernel_roofline.py --pkg head=.:triton_kda > $R/roofline_k128.txt 2>&1
timeout 200 python3 $S/kernel_roofline.py --pkg head=.:triton_kda --shape B2-T8192-H16-K256 > $R/roofline_k256.txt 2>&1
timeout 240 python3 $D/state_sweep.py > $R/state_sweep.txt 2>&1
grep -v Warn $R/roofline_k128.txt | grep -E "^\||summary" | cut -c1-120
grep -v Warn $R/roofline_k256.txt | grep -E "^\||summary" | cut -c1-120
cat $R/state_sweep.txt

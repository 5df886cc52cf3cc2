# Fifth call (one GPU): the fp32 unsaturated row's gradients with the code before the fp32 backward work of
# 2026-11-26 (c3b4415: tf32x3 products) and with this code (fp16-split products, fp16 pairs), on the same inputs.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R /tmp/b0
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
cp -r .base0/triton_kda .base0/cuda_fast /tmp/b0 && cp -r reference benchmarks /tmp/b0
A="-m benchmarks.gate_regimes --no-fla --dtypes fp32 --regimes unsaturated --layouts heads,gva_varlen --seeds 1"
(cd /tmp/b0 && PYTHONPATH=/tmp/b0 timeout 100 python3 $A --out $R/c3b4415 > $R/c3b4415.log 2>&1) &
PYTHONPATH=$PWD timeout 100 python3 $A --out $R/this > $R/this.log 2>&1 &
wait
grep -E "^\| |rc" $R/c3b4415.log $R/this.log | cut -c1-220
cd $OUT && tar czf r.tgz r && rm -rf r

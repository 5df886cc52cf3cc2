# Device call 4 (2 GPUs side by side): the fp32 gate-cumsum pair with lo stored as fp16 (lo * 2^16; 2 bytes an
# element instead of 4), against f6ea3e7 (.ab_base). GPU 0: benchmarks.ab fp32 fwd+bwd at B2 T8192 H32 (2 rounds);
# GPU 1: benchmarks.roofline --dtype fp32 for f6ea3e7 then this tree, one process each.
# Carried: .whl (fla-core 0.6.0), .cuda_cache (this tree's and f6ea3e7's libraries, nvcc 13.0, sm_90a), .ab_base.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
(export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc0
 timeout 300 python3 -m benchmarks.ab --base .ab_base --shapes B2-T8192-H32-fp32 --flags kimi --rounds 2 \
   --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt) &
(export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/tc1
 (cd .ab_base && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m benchmarks.roofline --dtype fp32) > $R/roofline_fp32_base.txt 2>&1
 echo "rc=$?" >> $R/roofline_fp32_base.txt
 timeout 150 python3 -m benchmarks.roofline --dtype fp32 > $R/roofline_fp32_head.txt 2>&1; echo "rc=$?" >> $R/roofline_fp32_head.txt) &
wait
sed -i '/UserWarning\|_warn_once/d' $R/*.txt
echo "== ab"; tail -5 $R/ab.txt
for f in roofline_fp32_base roofline_fp32_head; do echo "== $f"; grep -E "^\| (head|base) \| _|summary|rc=" $R/$f.txt | cut -c1-120; done
cd $OUT && tar czf r.tgz r && rm -rf r

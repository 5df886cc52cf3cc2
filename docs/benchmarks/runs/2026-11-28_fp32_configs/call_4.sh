# Device call 4 (one H200): the span kernel's later rows block by block and the gate cumsum at BK 32 for fp32 pairs.
# fwd+bwd (benchmarks.ab, Kimi flags, B2 T8192 H32, 2 rounds) against f6ea3e7 (.ab_base: fp32, bf16) and against
# 9c9080a (.ab_head: fp32, fp16); then benchmarks.roofline --dtype fp32 for 9c9080a and this tree, one process each.
# Carried: .cuda_cache (9c9080a's library, the same sources here, and f6ea3e7's), .ab_base, .ab_head.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
AB="python3 -m benchmarks.ab --flags kimi --rounds 2"
timeout 200 $AB --base .ab_base --shapes B2-T8192-H32-fp32,B2-T8192-H32 --out $R/ab_f6ea3e7 > $R/ab_f6ea3e7.txt 2>&1
echo "rc=$?" >> $R/ab_f6ea3e7.txt
timeout 200 $AB --base .ab_head --shapes B2-T8192-H32-fp32,B2-T8192-H32-fp16 --out $R/ab_9c9080a > $R/ab_9c9080a.txt 2>&1
echo "rc=$?" >> $R/ab_9c9080a.txt
(cd .ab_head && PYTHONPATH=$PWD timeout 70 python3 -m benchmarks.roofline --dtype fp32) > $R/roofline_fp32_9c9080a.txt 2>&1
echo "rc=$?" >> $R/roofline_fp32_9c9080a.txt
timeout 70 python3 -m benchmarks.roofline --dtype fp32 > $R/roofline_fp32_new.txt 2>&1; echo "rc=$?" >> $R/roofline_fp32_new.txt
sed -i '/UserWarning\|_warn_once/d' $R/*.txt
for f in ab_f6ea3e7 ab_9c9080a; do echo "== $f"; tail -6 $R/$f.txt; done
for f in roofline_fp32_9c9080a roofline_fp32_new; do echo "== $f"; grep -E "^\| head \| _|summary|rc=" $R/$f.txt | cut -c1-120; done

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee $R/gpu.txt
for v in old new; do
  P=$PWD; [ $v = old ] && P=$PWD/.ab_base
  for s in "B2-T8192-H32" "B1-T8192-H96"; do
    echo "== $v $s"; PYTHONPATH=/tmp/site:$P timeout 100 python3 docs/benchmarks/runs/2026-11-27_prefill_fwd/fwd_probe.py $s 2>&1 | grep -v -i warn | grep -v backend
  done
done > $R/kernels_ab.txt 2>&1; grep -A3 "==" $R/kernels_ab.txt | grep -v "^--" | paste - - - - | awk '{print $2, $3, "total", $6, $8, $14}'
PYTHONPATH=/tmp/site:$PWD timeout 300 python3 -m benchmarks.run --suite prefill,standard,gva,kimi,headdim --shapes B1-T8192-H96,B2-T8192-H32,H16-HV32,B2-T8192-H8-HV64,B1-T4096-H32,B1-T8192-H32,B1-T16384,B1-T32768,K256 --modes fwd --impl auto,fla --flags kimi --tune-cache benchmarks/fla_tune --out $R/bench 2>&1 | grep -v -i warn | grep " fwd " | cut -c1-150

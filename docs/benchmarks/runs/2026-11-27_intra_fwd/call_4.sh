# Last try of the transposed form in bf16: other launches (BK 64 and / or 8 warps) in case the fault is the launch's
# (triton-lang/triton#11366: several tl.dot, 32-wide blocks, 4 warps on sm_90).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
ok=""
for c in 64,4 32,8 64,8; do
  KDA_INTRA_CFG=$c timeout 100 python3 -m pytest -q -x tests/test_chunk_fwd.py -k "bf16" -p no:cacheprovider > $R/tests_bf16_$c.txt 2>&1
  echo "cfg $c: $(tail -1 $R/tests_bf16_$c.txt)"
  grep -q "failed\|error" $R/tests_bf16_$c.txt || ok="$ok --pkg c$c=.:triton_kda@KDA_INTRA_CFG=$c"
done
[ -z "$ok" ] && exit 1
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old $ok > $R/roofline_k128.txt 2>&1
grep -E "intra_fwd|summary" $R/roofline_k128.txt | cut -c1-150

# The transposed form faulted in bf16 too (call_2). Which part: FORM 0 as call_2, 1 fp32 operands (TF32 products),
# 2 the row block picked by a one-hot product instead of a reduction over the [NC, BC, BK] view. Each in its own
# process (a fault ends the CUDA context), then the per-kernel A/B of the forms that pass.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
ok=""
for f in 1 2; do
  KDA_INTRA_FORM=$f timeout 100 python3 -m pytest -q -x tests/test_chunk_fwd.py -k "bf16" -p no:cacheprovider > $R/tests_bf16_form$f.txt 2>&1
  echo "form $f: $(tail -1 $R/tests_bf16_form$f.txt)"
  grep -q "failed\|error" $R/tests_bf16_form$f.txt || ok="$ok --pkg form$f=.:triton_kda@KDA_INTRA_FORM=$f"
done
[ -z "$ok" ] && exit 1
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old $ok > $R/roofline_k128.txt 2>&1
grep -E "intra_fwd|summary" $R/roofline_k128.txt | cut -c1-150

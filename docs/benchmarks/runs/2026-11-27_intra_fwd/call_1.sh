# Intra forward with one batched product per matrix (row blocks x their own right operands) against HEAD's four
# masked products (.base: db15b71's package as triton_kda_old); GPU tests of the new kernel first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda > $R/roofline_k128.txt 2>&1
grep -E "intra|all|summary" $R/roofline_k128.txt | cut -c1-150
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda --shape B2-T8192-H16-K256 > $R/roofline_k256.txt 2>&1
grep -E "intra|all|summary" $R/roofline_k256.txt | cut -c1-150
timeout 100 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda --shape B1-T8192-H16 --dtype fp32 > $R/roofline_fp32.txt 2>&1
grep -E "intra|all|summary" $R/roofline_fp32.txt | cut -c1-150
timeout 200 python3 -m pytest -q -x tests/test_chunk_fwd.py tests/test_chunk_bwd.py tests/test_vs_fla.py -p no:cacheprovider > $R/tests.txt 2>&1
tail -4 $R/tests.txt

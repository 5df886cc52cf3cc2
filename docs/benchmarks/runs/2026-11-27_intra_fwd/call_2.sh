# The transposed form (64-row products: [BT, BK] x [BK, BC] per row block) after the [BC, BK] x [BK, BT] form
# faulted in bf16 (illegal memory access, triton 3.6.0; fp32 ran): bf16 test first, then the per-kernel A/B, then tests.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
timeout 120 python3 -m pytest -q -x tests/test_chunk_fwd.py -k "bf16 and K16" -p no:cacheprovider > $R/tests_bf16.txt 2>&1
tail -2 $R/tests_bf16.txt
grep -q " passed" $R/tests_bf16.txt || exit 1
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda > $R/roofline_k128.txt 2>&1
grep -E "intra_fwd|summary" $R/roofline_k128.txt | cut -c1-150
timeout 150 python3 -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda --shape B2-T8192-H16-K256 > $R/roofline_k256.txt 2>&1
grep -E "intra_fwd|summary" $R/roofline_k256.txt | cut -c1-150
timeout 200 python3 -m pytest -q tests/test_chunk_fwd.py tests/test_chunk_bwd.py tests/test_vs_fla.py tests/test_causality.py -p no:cacheprovider > $R/tests.txt 2>&1
tail -4 $R/tests.txt

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
X=.var/x
timeout 260 python3 $S/bwd_variants.py --pkg base=$X:triton_kda_base --pkg split_once=$X:triton_kda_wyc --pkg split_each=$X:triton_kda_wyi --shapes B1-T8192-H16,B2-T8192-H32,B1-T8192-H16-K256 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt
grep -v -- "---" $OUT/r/variants.txt | grep "^|" | head -12; tail -2 $OUT/r/variants.txt
timeout 200 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/r/chk > $OUT/r/kda-check.txt 2>&1
echo "rc=$?" >> $OUT/r/kda-check.txt; tail -3 $OUT/r/kda-check.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_chunk_bwd.py tests/test_chunk_fwd.py tests/test_jit.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; tail -2 $OUT/r/pytest.txt
cd $OUT && tar czf r.tgz r && rm -rf r

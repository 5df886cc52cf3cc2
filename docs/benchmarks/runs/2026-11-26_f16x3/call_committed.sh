python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 230 python3 $S/bwd_variants.py --pkg base=.var/x:triton_kda_base --pkg main=.:triton_kda --shapes B1-T8192-H16,B2-T8192-H32,B1-T8192-H16-K256 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 --memory > $OUT/r/times.txt 2>&1
echo "rc=$?" >> $OUT/r/times.txt; grep "^|" $OUT/r/times.txt | head -8; tail -2 $OUT/r/times.txt
timeout 150 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/r/chk > $OUT/r/chk.log 2>&1
echo "rc=$?" >> $OUT/r/chk.log; tail -2 $OUT/r/chk.log
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 6 tests/test_jit.py tests/test_chunk_bwd.py tests/test_state_cp.py tests/test_configs.py tests/test_chunk_fwd.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; tail -3 $OUT/r/pytest.txt
cd $OUT && tar czf r.tgz r && rm -rf r

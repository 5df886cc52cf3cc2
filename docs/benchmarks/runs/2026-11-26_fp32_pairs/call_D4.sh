python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 150 python3 docs/benchmarks/runs/2026-11-26_fp32_pairs/fault_probe.py > $OUT/r/dbg.txt 2>&1; grep -c OK $OUT/r/dbg.txt; grep -B1 -A4 FAIL $OUT/r/dbg.txt | cut -c1-160 | head
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_chunk_bwd.py tests/test_state_cp.py tests/test_cuda_graphs.py tests/test_compile.py tests/test_chunk_fwd.py tests/test_jit.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; grep -E "^(FAILED|ERROR)" $OUT/r/pytest.txt | head -5; tail -2 $OUT/r/pytest.txt
X=.var/x
timeout 200 python3 $S/bwd_variants.py --pkg base=$X:triton_kda_base --pkg pairs=$X:triton_kda_pairs --shapes B1-T8192-H16,B2-T8192-H32,B1-T32768-H8,B1-T8192-H16-K256 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 --memory > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt
grep -v -- "---" $OUT/r/variants.txt | grep "^|" | head -24; tail -1 $OUT/r/variants.txt
cd $OUT && tar czf r.tgz r && rm -rf r

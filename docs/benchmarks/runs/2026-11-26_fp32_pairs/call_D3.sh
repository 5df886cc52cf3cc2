python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
mkdir -p $OUT/r
timeout 200 python3 docs/benchmarks/runs/2026-11-26_fp32_pairs/fault_probe.py > $OUT/r/dbg.txt 2>&1; cat $OUT/r/dbg.txt | cut -c1-160
timeout 330 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_chunk_bwd.py tests/test_state_cp.py tests/test_cuda_graphs.py tests/test_compile.py tests/test_chunk_fwd.py tests/test_jit.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; grep -E "^(FAILED|ERROR)" $OUT/r/pytest.txt | head; tail -2 $OUT/r/pytest.txt
cd $OUT && tar czf r.tgz r && rm -rf r

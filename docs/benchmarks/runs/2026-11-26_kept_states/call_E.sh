python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_state_cp.py tests/test_chunk_bwd.py tests/test_cuda_graphs.py tests/test_compile.py tests/test_chunk_fwd.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; tail -4 $OUT/r/pytest.txt
timeout 300 python3 $S/kept_states.py --shapes B1-T8192-H16,B2-T8192-H32 --dtypes bf16,fp16,fp32 > $OUT/r/kept.txt 2>&1
echo "rc=$?" >> $OUT/r/kept.txt; grep "^| B\|summary" $OUT/r/kept.txt | head -8
cd $OUT && tar czf r.tgz r && rm -rf r

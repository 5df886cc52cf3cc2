python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 380 python3 $S/kept_states.py --shapes B1-T8192-H16,B2-T8192-H32,B1-T32768-H8 --dtypes fp32,fp16,bf16 > $OUT/r/kept.txt 2>&1
echo "rc=$?" >> $OUT/r/kept.txt; grep "^|\|summary" $OUT/r/kept.txt | grep -v -- "---" | head -70
timeout 190 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_state_cp.py tests/test_chunk_bwd.py tests/test_cuda_graphs.py tests/test_compile.py > $OUT/r/pytest.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest.txt; tail -4 $OUT/r/pytest.txt
cd $OUT && tar czf r.tgz r && rm -rf r

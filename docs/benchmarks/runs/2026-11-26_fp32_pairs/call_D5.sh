python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
mkdir -p $OUT/r
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_compile.py tests/test_chunk_bwd.py > $OUT/r/pytest2.txt 2>&1
echo "rc=$?" >> $OUT/r/pytest2.txt; grep -E "^(FAILED|ERROR)" $OUT/r/pytest2.txt | head -5; tail -2 $OUT/r/pytest2.txt
cd $OUT && tar czf r.tgz r && rm -rf r

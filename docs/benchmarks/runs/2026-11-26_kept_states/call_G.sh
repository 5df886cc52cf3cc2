python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
mkdir -p $OUT/r
timeout 200 python3 docs/benchmarks/runs/2026-11-26_kept_states/host_profile.py > $OUT/r/hostprof.txt 2>&1
echo "rc=$?" >> $OUT/r/hostprof.txt
grep "mode\|rc=" $OUT/r/hostprof.txt
cd $OUT && tar czf r.tgz r && rm -rf r

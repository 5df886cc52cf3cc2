python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
timeout 120 python3 $S/kept_states.py --shapes B1-T8192-H16 --dtypes fp32,fp16 > $OUT/r/narrow.txt 2>&1
grep "^| B1\|summary" $OUT/r/narrow.txt | head -2
KDA_EXP_WIDE=1 timeout 120 python3 $S/kept_states.py --shapes B1-T8192-H16 --dtypes fp32,fp16 > $OUT/r/wide.txt 2>&1
grep "^| B1\|summary\|_kda_state_fwd" $OUT/r/wide.txt | head -6
cd $OUT && tar czf r.tgz r && rm -rf r

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 140 python3 $S/kept_states.py --shapes B1-T8192-H16,B1-T32768-H8 --dtypes fp32,fp16 --rounds 3 > $OUT/r/kept_h200.txt 2>&1
echo "rc=$?" >> $OUT/r/kept_h200.txt; cat $OUT/r/gpu.txt; grep "^| B1\|summary\|rc=" $OUT/r/kept_h200.txt | head -6
cd $OUT && tar czf r.tgz r && rm -rf r

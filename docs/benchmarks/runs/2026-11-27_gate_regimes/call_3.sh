# Third call (4 GPUs): the GPU tests of the compiled backward and of the fp32 backward work landed in ef14d25, and
# kda-check --full without fla, one dtype per GPU.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
P="python3 -m pytest -q -p no:cacheprovider"
K="python3 -m triton_kda.check.cli --full --no-fla --jobs 12"
(export CUDA_VISIBLE_DEVICES=0; timeout 450 $P tests/test_cuda_sm90_bwd.py tests/test_dispatch.py tests/test_jit.py \
 > $R/pytest_sm90.txt 2>&1; echo "rc=$?" >> $R/pytest_sm90.txt) &
(export CUDA_VISIBLE_DEVICES=1; timeout 450 $K --filter=-fp32 --out $R/chk32 > $R/chk32.log 2>&1; echo "rc=$?" >> $R/chk32.log) &
(export CUDA_VISIBLE_DEVICES=2; timeout 450 $P -n 4 tests/test_chunk_bwd.py tests/test_state_cp.py tests/test_chunk_fwd.py \
 > $R/pytest_bwd.txt 2>&1; echo "rc=$?" >> $R/pytest_bwd.txt) &
(export CUDA_VISIBLE_DEVICES=3; timeout 450 $K --filter=-bf16 --out $R/chk16 > $R/chk16.log 2>&1; echo "rc=$?" >> $R/chk16.log) &
wait
for f in pytest_sm90.txt pytest_bwd.txt; do echo "== $f"; grep -E "passed|failed|FAILED|rc=" $R/$f | tail -8; done
for f in chk32 chk16; do echo "== $f"; grep -E "FAIL|rows:|rc=" $R/$f.log | cut -c1-200 | tail -8; done
cd $OUT && tar czf r.tgz r && rm -rf r

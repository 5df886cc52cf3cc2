# Fourth call (4 GPUs), after the Triton backward took the compiled kernel's block split for the lower-bound gate:
# the compiled backward's GPU tests, the sweep's bf16 lower-bound regimes, the bf16 GPU tests of the Triton backward,
# kda-check --full's bf16 rows without fla.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('.tune')), 'tuning files')"
P="python3 -m pytest -q -p no:cacheprovider"
(export CUDA_VISIBLE_DEVICES=0; timeout 280 $P -n 4 tests/test_cuda_sm90_bwd.py > $R/pytest_sm90.txt 2>&1
 echo "rc=$?" >> $R/pytest_sm90.txt) &
(export CUDA_VISIBLE_DEVICES=1; timeout 280 python3 -m benchmarks.gate_regimes --dtypes bf16 --regimes unsaturated,saturated \
 --out $R/lb > $R/lb.log 2>&1; echo "rc=$?" >> $R/lb.log) &
(export CUDA_VISIBLE_DEVICES=2; timeout 280 $P -n 4 tests/test_chunk_bwd.py -k "bf16 or split" > $R/pytest_bwd.txt 2>&1
 echo "rc=$?" >> $R/pytest_bwd.txt) &
(export CUDA_VISIBLE_DEVICES=3; timeout 280 python3 -m triton_kda.check.cli --full --no-fla --jobs 12 --filter=-bf16 \
 --out $R/chk16 > $R/chk16.log 2>&1; echo "rc=$?" >> $R/chk16.log) &
wait
for f in pytest_sm90.txt pytest_bwd.txt; do echo "== $f"; grep -E "passed|failed|FAILED|Error:|rc=" $R/$f | tail -6; done
echo "== lb"; grep -E "^\| |summary|rc=" $R/lb.log | tail -14 | cut -c1-175
echo "== chk16"; grep -E "FAIL|rows:|rc=" $R/chk16.log | cut -c1-200 | tail -6
cd $OUT && tar czf r.tgz r && rm -rf r

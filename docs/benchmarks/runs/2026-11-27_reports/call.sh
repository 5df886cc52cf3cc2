# One call per card (2 GPUs of one kind): every K=V=128 suite and K=V=256 against fla in one process, chunk_kda as
# a user calls it (impl "auto"); Kimi flags forward and fwd+bwd on GPU 0, pre-gated fwd+bwd on GPU 1, then on GPU 1
# the GPU tests of the modules split on 2026-11-27.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
RUN="python3 -m benchmarks.run --impl auto,fla --tune-cache benchmarks/fla_tune --out $R"
S=standard,kimi,long,varlen,gva
(export CUDA_VISIBLE_DEVICES=0
 timeout 420 $RUN --suite $S --modes fwd,fwdbwd --flags kimi > $R/run_kimi.log 2>&1; echo "rc=$?" >> $R/run_kimi.log
 timeout 120 $RUN --suite headdim --shapes K256 --modes fwd,fwdbwd --flags kimi > $R/run_k256_kimi.log 2>&1
 echo "rc=$?" >> $R/run_k256_kimi.log) &
(export CUDA_VISIBLE_DEVICES=1
 timeout 300 $RUN --suite $S --modes fwdbwd --flags pregated > $R/run_pregated.log 2>&1
 echo "rc=$?" >> $R/run_pregated.log
 timeout 90 $RUN --suite headdim --shapes K256 --modes fwdbwd --flags pregated > $R/run_k256_pregated.log 2>&1
 echo "rc=$?" >> $R/run_k256_pregated.log
 timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 $TESTS > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt) &
wait
for f in run_kimi run_k256_kimi run_pregated run_k256_pregated; do echo "== $f"; grep -E " x[0-9.]+ vs fla|rc=" $R/$f.log | grep -v "   fla " | cut -c1-150; done
echo "== pytest"; tail -3 $R/pytest.txt

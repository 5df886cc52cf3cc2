# The same suites on one H100 (nvidia-h100-x1), one after another: Kimi flags forward and fwd+bwd, K=V=256, then
# pre-gated fwd+bwd. (call.sh ran them on two GPUs side by side; its GPU tests ran on the H200s.)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
RUN="python3 -m benchmarks.run --impl auto,fla --tune-cache benchmarks/fla_tune --out $R"
S=standard,kimi,long,varlen,gva
timeout 255 $RUN --suite $S --modes fwd,fwdbwd --flags kimi > $R/run_kimi.log 2>&1; echo "rc=$?" >> $R/run_kimi.log
timeout 55 $RUN --suite headdim --shapes K256 --modes fwd,fwdbwd --flags kimi > $R/run_k256_kimi.log 2>&1
echo "rc=$?" >> $R/run_k256_kimi.log
timeout 215 $RUN --suite $S --modes fwdbwd --flags pregated > $R/run_pregated.log 2>&1; echo "rc=$?" >> $R/run_pregated.log
timeout 45 $RUN --suite headdim --shapes K256 --modes fwdbwd --flags pregated > $R/run_k256_pregated.log 2>&1
echo "rc=$?" >> $R/run_k256_pregated.log
for f in run_kimi run_k256_kimi run_pregated run_k256_pregated; do echo "== $f"; grep -E " x[0-9.]+ vs fla|rc=" $R/$f.log | grep -v "   fla " | cut -c14-120; done

# Device call 2 (2 GPUs): the wheel check again (call.sh, its first run lost the script's path), then the reports at
# HEAD: every K=V=128 suite and K=V=256 against fla 0.6.0 in one process, chunk_kda as a user calls it (impl "auto");
# Kimi flags forward and fwd+bwd on GPU 0, pre-gated fwd+bwd on GPU 1.
# Carried: dist/ (the wheel), .cuda_cache (nvcc 13.0, sm_90a), .whl (fla-core 0.6.0).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
R=$OUT/r; mkdir -p $R
(export CUDA_VISIBLE_DEVICES=1; timeout 100 bash docs/benchmarks/runs/2026-11-28_h200/call.sh > $R/wheel.log 2>&1
 echo "rc=$?" >> $R/wheel.log)
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > $R/gpu.txt
RUN="python3 -m benchmarks.run --impl auto,fla --tune-cache benchmarks/fla_tune --out $R"
S=standard,kimi,long,varlen,gva
(export CUDA_VISIBLE_DEVICES=0
 timeout 400 $RUN --suite $S --modes fwd,fwdbwd --flags kimi > $R/run_kimi.log 2>&1; echo "rc=$?" >> $R/run_kimi.log
 timeout 80 $RUN --suite headdim --shapes K256 --modes fwd,fwdbwd --flags kimi > $R/run_k256_kimi.log 2>&1
 echo "rc=$?" >> $R/run_k256_kimi.log) &
(export CUDA_VISIBLE_DEVICES=1
 timeout 300 $RUN --suite $S --modes fwdbwd --flags pregated > $R/run_pregated.log 2>&1
 echo "rc=$?" >> $R/run_pregated.log
 timeout 90 $RUN --suite headdim --shapes K256 --modes fwdbwd --flags pregated > $R/run_k256_pregated.log 2>&1
 echo "rc=$?" >> $R/run_k256_pregated.log) &
wait
cat $R/wheel.log | cut -c1-250
for f in run_kimi run_k256_kimi run_pregated run_k256_pregated; do echo "== $f"; grep -E " x[0-9.]+ vs fla|rc=" $R/$f.log | grep -v "   fla " | cut -c1-150; done
cp -r $OUT/wheel $R/ 2>/dev/null; cd $OUT && tar czf r.tgz r && rm -rf r wheel

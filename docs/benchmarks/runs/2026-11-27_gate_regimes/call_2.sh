# Second call (4 GPUs), after the compiled kernel's lower-bound gate took split products on its block's own tokens
# only: fla's fp16 tuning compiled first in parallel workers, then the sweep per GPU (bf16 after and before; fp16 per
# layout), the fwd+bwd cost against the base, kda-check --full's bf16 rows with fla.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
W=$PWD R=$OUT/r; mkdir -p $R /tmp/b
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
python3 -c "from pathlib import Path; from benchmarks.tune_cache import restore; print(restore(Path('.tune')), 'tuning files')"
cp -r .base/triton_kda .base/cuda_fast /tmp/b && cp -r reference benchmarks tests setup.cfg /tmp/b
G="python3 -m benchmarks.gate_regimes"
(export CUDA_VISIBLE_DEVICES=1; timeout 330 $G --dtypes bf16 --out $R/after16 > $R/after16.log 2>&1
 echo "rc=$?" >> $R/after16.log; cd /tmp/b && PYTHONPATH=/tmp/site:/tmp/b timeout 170 $G --dtypes bf16 --layouts heads \
 --regimes unsaturated,saturated,softplus --out $R/before16 > $R/before16.log 2>&1; echo "rc=$?" >> $R/before16.log) &
(export CUDA_VISIBLE_DEVICES=0; timeout 130 python3 -m benchmarks.fla_prewarm --gate-regimes fp16 --workers 40 \
 --budget-s 125 > $R/prewarm.txt 2>&1; tail -1 $R/prewarm.txt
 timeout 370 $G --dtypes fp16 --layouts heads --out $R/fp16h > $R/fp16h.log 2>&1; echo "rc=$?" >> $R/fp16h.log) &
(sleep 130; export CUDA_VISIBLE_DEVICES=2; timeout 370 $G --dtypes fp16 --layouts gva_varlen --out $R/fp16g \
 > $R/fp16g.log 2>&1; echo "rc=$?" >> $R/fp16g.log) &
(sleep 130; export CUDA_VISIBLE_DEVICES=3; timeout 170 python3 -m benchmarks.ab --base .base --flags kimi,pregated \
 --rounds 3 --out $R/ab > $R/ab.txt 2>&1; echo "rc=$?" >> $R/ab.txt
 timeout 200 python3 -m triton_kda.check.cli --full --filter=T777 --jobs 9 --out $R/chk16 > $R/chk16.log 2>&1
 echo "rc=$?" >> $R/chk16.log) &
wait
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; print(save(Path('$R/tune')), 'saved')"
for f in after16 before16 fp16h fp16g; do echo "== $f"; grep -E "^\| |rc=" $R/$f.log | cut -c1-160; done
echo "== ab"; tail -4 $R/ab.txt; echo "== chk16"; tail -6 $R/chk16.log
cd $OUT && tar czf r.tgz r && rm -rf r

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.var/cuda_cache
S=docs/benchmarks/scripts
mkdir -p $OUT/r
for e in 0 auto; do
  if [ $e = 0 ]; then export TRITON_KDA_STATE_CKPT_CHUNKS=0; else unset TRITON_KDA_STATE_CKPT_CHUNKS; fi
  echo "TRITON_KDA_STATE_CKPT_CHUNKS=$e" >> $OUT/r/sync.txt
  timeout 100 python3 $S/sync_probe.py main=.:triton_kda >> $OUT/r/sync.txt 2>&1
done
unset TRITON_KDA_STATE_CKPT_CHUNKS
cat $OUT/r/sync.txt | grep -v Warning
timeout 150 python3 $S/kept_states.py --shapes B1-T8192-H16 --dtypes bf16 --rounds 7 > $OUT/r/kept_bf16.txt 2>&1
echo "rc=$?" >> $OUT/r/kept_bf16.txt; grep "^| B" $OUT/r/kept_bf16.txt | head -2
cd $OUT && tar czf r.tgz r && rm -rf r

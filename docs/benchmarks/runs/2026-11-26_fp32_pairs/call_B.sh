python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
X=.var/x
timeout 300 python3 $S/bwd_variants.py --pkg base=$X:triton_kda_base --pkg pre=$X:triton_kda_pre --shapes B1-T8192-H16,B2-T8192-H32 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt
timeout 100 python3 docs/benchmarks/runs/2026-11-26_fp32_pairs/errors.py triton_kda_base,triton_kda_pre 2048 > $OUT/r/acc.txt 2>&1
echo "rc=$?" >> $OUT/r/acc.txt
cd $OUT && tar czf r.tgz r
grep -v -- "---" r/variants.txt | grep "^|" | head -14; tail -3 r/variants.txt; cat r/acc.txt | grep -v Warn
rm -rf r

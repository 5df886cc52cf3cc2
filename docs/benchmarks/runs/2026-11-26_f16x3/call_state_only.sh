python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
timeout 300 python3 $S/bwd_variants.py --pkg main=.:triton_kda --pkg f16=.var/f16:triton_kda_f16 --shapes B1-T8192-H16,B2-T8192-H32 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt; grep -v Warn $OUT/r/variants.txt | tail -30
cd $OUT && tar czf r.tgz r && rm -rf r

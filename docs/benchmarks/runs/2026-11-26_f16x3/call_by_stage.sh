python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
timeout 330 python3 $S/bwd_variants.py --pkg main=.:triton_kda --pkg s=.var/f16:triton_kda_s --pkg w=.var/f16:triton_kda_w --pkg i=.var/f16:triton_kda_i --shapes B1-T8192-H16,B2-T8192-H32 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt; grep -v Warn $OUT/r/variants.txt | tail -22
TRITON_KDA_F16X3=state_bwd,wy_bwd,intra_state timeout 150 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/r/chk_i > $OUT/r/chk_i.log 2>&1
echo "rc=$?" >> $OUT/r/chk_i.log; tail -3 $OUT/r/chk_i.log
cd $OUT && tar czf r.tgz r && rm -rf r

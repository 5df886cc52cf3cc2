python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 220 python3 $S/bwd_variants.py --pkg main=.:triton_kda --pkg f16=.var/f16:triton_kda_f16 --shapes B1-T8192-H16,B2-T8192-H32 --dtypes fp32 --rounds 3 --profile B1-T8192-H16:fp32 > $OUT/r/variants.txt 2>&1
echo "rc=$?" >> $OUT/r/variants.txt; grep -v Warn $OUT/r/variants.txt | tail -30
TRITON_KDA_STATE_F16X3=1 timeout 150 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/r/chk_f16 > $OUT/r/chk_f16.log 2>&1
echo "rc=$?" >> $OUT/r/chk_f16.log; tail -3 $OUT/r/chk_f16.log
timeout 150 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/r/chk_base > $OUT/r/chk_base.log 2>&1
echo "rc=$?" >> $OUT/r/chk_base.log; tail -3 $OUT/r/chk_base.log
cd $OUT && tar czf r.tgz r && rm -rf r

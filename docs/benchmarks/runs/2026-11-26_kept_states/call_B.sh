python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
W=B1-T8192-H16:fp32
timeout 560 python3 $S/bwd_variants.py --pkg main=.:triton_kda --shapes "" \
  --sweep "wy.wy_bwd_config@$W=num_warps=8;BK=32;BK=32,num_warps=8;BV=32" \
  --sweep "intra.intra_bwd_config@$W=num_warps=8;BK=32;BK=32,num_warps=8" \
  --sweep "intra.intra_config@$W=num_warps=8;BK=64,num_warps=8" \
  --sweep "wy.wy_fwd_config@$W=num_warps=8;BK=64;num_stages=1" --sweep "state.state_config@$W=num_stages=1;BV=32,num_warps=8,num_stages=1" > $OUT/r/sweep.txt 2>&1
echo "rc=$?" >> $OUT/r/sweep.txt; grep -v "^|---" $OUT/r/sweep.txt | tail -40
cd $OUT && tar czf r.tgz r && rm -rf r

# Device call 3 (one H200): the mma recurrence's state load / store inline again (168 registers as before 9c9080a) and
# the 64-token recurrence at 3 stages. GPU tests of both compiled forwards, then the no-grad forward's kernel times:
# this tree (sm90, sm90 with the 16-token wgmma recurrence, sm90_v2) and, in the same call, 9971892's tree (.wgmma:
# the state load / store before 9c9080a; ../2026-11-28_device/state_times.py, its mma default mode).
# Carried: .cuda_cache (this tree's library), .wgmma (9971892's sources with their library).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py tests/test_cuda_sm90_v2.py \
  > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt
timeout 120 python3 docs/benchmarks/runs/2026-11-28_state64/state64_times.py --modes sm90,sm90-wgmma16,sm90_v2 \
  > $R/times.txt 2>&1; echo "rc=$?" >> $R/times.txt
(cd .wgmma && PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache timeout 100 \
  python3 ../docs/benchmarks/runs/2026-11-28_device/state_times.py) > $R/times_9971892.txt 2>&1
echo "rc=$?" >> $R/times_9971892.txt
grep -E "^FAILED|passed|failed|rc=" $R/pytest.txt | cut -c1-300
for f in times times_9971892; do echo "== $f"; grep -E " us;|_kernel|rc=|Error" $R/$f.txt | cut -c1-110; done

# Device call 1 (one H200): the compiled 64-token intra stage's first run: sm90_v2's GPU tests, its kernel time
# against Triton's intra forward and the v2 forward against the default (intra64_bench.py), again with the kernel's
# register target at two CTAs an SM (TRITON_KDA_NVCC_FLAGS=-DKDA_I64_MIN_BLOCKS=2, its own cached library); then
# the few-head rows sm90's verifier still hands to Triton's split sequences (few_heads.py, N HV < 8).
# Carried: .cuda_cache (this tree's libraries, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_intra64
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
grep -E "^FAILED|^E  |passed|failed|rc=" $R/pytest.txt | cut -c1-400 | head -40
timeout 120 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96,B4-T4096-H16 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
TRITON_KDA_NVCC_FLAGS=-DKDA_I64_MIN_BLOCKS=2 timeout 80 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 \
  > $R/bench_minblocks2.txt 2>&1; echo "rc=$?" >> $R/bench_minblocks2.txt; cat $R/bench_minblocks2.txt
timeout 100 python3 docs/benchmarks/runs/2026-11-29_state64/few_heads.py \
  --shapes B1-T4096-H4,B1-T8192-H4,B1-T16384-H4,B1-T8192-H2,B1-T16384-H2,B1-T8192-H1 > $R/few_heads.md 2>&1
echo "rc=$?" >> $R/few_heads.md; cat $R/few_heads.md

# Device call 11 (one H200): sm90's few-head hand-offs to Triton after call 10 (none for the wgmma recurrence without
# split sequences; split ones only below N HV = 8 or above 8192 tokens): the verifier's GPU tests, and few_heads.py at
# four shapes (default dispatch against sm90 forced).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py -k "verifier or dispatch" > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
timeout 60 python3 docs/benchmarks/runs/2026-11-29_state64/few_heads.py --shapes B1-T8192-H16,B1-T8192-H8,B1-T16384-H8,B1-T8192-H4 > $R/few_heads.md 2>&1
echo "rc=$?" >> $R/few_heads.md
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest.txt | cut -c1-300
cat $R/few_heads.md

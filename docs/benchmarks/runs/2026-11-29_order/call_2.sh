# Device call 2 (one H200): sm90_split's GPU tests after the case list's mend (every case at least two 64-token
# chunks; the Triton comparison at two bf16 roundings), then each kernel's device time in the forward of the skewed
# varlen batch and of its parts (kernel_times.py, one piece). Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_split.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=|AssertionError" $R/pytest.txt | cut -c1-300
TRITON_KDA_SM90_PIECES=1 timeout 150 python3 $D/kernel_times.py --batches 8192+128x64,8192x2,8192,128x64,128x128,1638x10 \
  > $R/kernels.txt 2>&1
echo "rc=$?" >> $R/kernels.txt; cat $R/kernels.txt

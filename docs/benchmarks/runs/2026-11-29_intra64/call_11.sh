# Device call 11 (one H200): the review's mends (sm90.input_fields / sm90.buffer shared by the two argument blocks'
# Python side; wu_mma in kda_fwd.cu, every kernel's SASS byte-identical): sm90's and sm90_v2's GPU tests.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90.py tests/test_cuda_sm90_v2.py \
  > $R/pytest.txt 2>&1; echo "rc=$?" >> $R/pytest.txt
grep -E "^FAILED|^E  |passed|failed|rc=" $R/pytest.txt | cut -c1-400 | head -30

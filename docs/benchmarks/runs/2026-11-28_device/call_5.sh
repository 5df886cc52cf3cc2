# Device call 5 (one GPU): tests/test_cuda_sm90.py after the state's h0 load and ht store became one pair of device
# functions for both recurrence kernels (load_state / store_state). Carried: .cuda_cache (this tree, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache TRITON_CACHE_DIR=/tmp/tc
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 -rfs tests/test_cuda_sm90.py 2>&1 | grep -E "passed|failed|^FAILED|^ERROR"

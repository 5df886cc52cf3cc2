# Device call 8 (one H200), an experiment: sm90_split with the compiled 64-token recurrence (`kda_state64_fwd`) over
# Triton's pieces from their start states (TRITON_KDA_SM90_SPLIT=state64) instead of Triton's serial pass over them:
# sm90_split's GPU tests in both modes, the A/B (env_bench.py) and each kernel's device time. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_split.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt; grep -E "^FAILED|^ERROR|passed|failed|rc=|AssertionError" $R/pytest.txt | cut -c1-300
(timeout 150 python3 $D/env_bench.py --shapes B1-T32768-H8,B1-T65536-H8,B1-T131072-H8 \
   --envs "TRITON_KDA_SM90_SPLIT=1;TRITON_KDA_SM90_SPLIT=state64" --repeat 3
 for m in 1 state64; do TRITON_KDA_SM90_SPLIT=$m timeout 60 python3 $D/kernel_times.py --H 8 --batches 32768; done
) > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

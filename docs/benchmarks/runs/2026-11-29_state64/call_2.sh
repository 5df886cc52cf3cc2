# Device call 2 (one H200): the 64-token recurrence after its instruction diet (int32 tile offsets on per-chunk bases,
# the decay 2^gl formed once per k in shared memory, one compare per finite check) with the warpgroup count chosen at
# launch: GPU tests of both compiled forwards (sm90_v2 with one and two warpgroups), times of the kernel alone per
# warpgroup count against Triton's pass and of the forward (state64_bench.py), ncu stall reasons at B2 T8192 H32.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_state64
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.max"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_v2.py tests/test_cuda_sm90.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
timeout 200 python3 $D/state64_bench.py > $R/bench.txt 2>&1; echo "rc=$?" >> $R/bench.txt
for m in v2:TRITON_KDA_SM90_FWD=v2 triton:TRITON_KDA_SM90=0; do
    env ${m#*:} timeout 100 $NCU --clock-control none --kernel-name regex:state --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --metrics "$MET" \
        python3 $D/ncu_drive.py B2-T8192-H32 2>&1 | grep -v -i "==warn" > $R/ncu_${m%%:*}.txt
    echo "ncu ${m%%:*} rc=$?"
done
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest.txt | cut -c1-300
cat $R/bench.txt | cut -c1-400
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "Duration|stalled|inst_executed|bytes|cycles_elapsed" $f | awk '$NF+0 > 0.05 || /Duration|inst|bytes|cycles/' | cut -c1-120; done

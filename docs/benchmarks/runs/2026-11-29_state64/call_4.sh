# Device call 4 (one H200): the 64-token recurrence's w / qg / kg / Aqk tiles in 128-byte swizzled layouts (a quarter
# warp's cp.async fills one row's 128 contiguous bytes into all 32 banks). GPU tests of sm90_v2 with kg's descriptor as
# built (LBO 8192 between channel halves, SBO 1024 between 8-token groups) and, where those fail, with the two swapped
# (-DKDA_KG_LBO=1024 -DKDA_KG_SBO=8192); times of the variant that passes (state64_bench.py) and ncu's L2 traffic.
# Carried: .cuda_cache (this tree's library built both ways, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_state64
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,smsp__inst_executed.sum,dram__bytes_read.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs -x tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
rc=$?; echo "rc=$rc" >> $R/pytest.txt
if [ $rc != 0 ]; then
    export TRITON_KDA_NVCC_FLAGS="-DKDA_KG_LBO=1024 -DKDA_KG_SBO=8192"
    timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs -x tests/test_cuda_sm90_v2.py > $R/pytest_swapped.txt 2>&1
    echo "rc=$?" >> $R/pytest_swapped.txt
fi
timeout 120 python3 $D/state64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 > $R/bench.txt 2>&1; echo "rc=$?" >> $R/bench.txt
TRITON_KDA_SM90_FWD=v2 timeout 100 $NCU --clock-control none --kernel-name regex:state --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --metrics "$MET" python3 $D/ncu_drive.py B2-T8192-H32 2>&1 | grep -v -i "==warn" > $R/ncu_v2.txt
for f in $R/pytest*.txt; do echo "== $f"; grep -E "^FAILED|passed|failed|rc=|Error|assert" $f | head -8 | cut -c1-300; done
cat $R/bench.txt | cut -c1-400
grep -E "Duration|lts__|inst_executed|dram__|stalled" $R/ncu_v2.txt | cut -c1-120

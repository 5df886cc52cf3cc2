# Device call 3 (one H200): the 64-token recurrence with plain cp.async for full chunks (the zero-filling form only
# for a sequence's last chunk): ncu at B2 T8192 H32 had shown 2.46 GB through L2 against Triton's pass's 1.13 GB for
# the same DRAM bytes. GPU tests of sm90_v2, times (state64_bench.py, two shapes), ncu with L2 traffic by source.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_state64
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_hit.sum,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__inst_executed.sum,dram__bytes_read.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
timeout 120 python3 $D/state64_bench.py --shapes B2-T8192-H32,B1-T8192-H96 > $R/bench.txt 2>&1; echo "rc=$?" >> $R/bench.txt
for m in v2:TRITON_KDA_SM90_FWD=v2 triton:TRITON_KDA_SM90=0; do
    env ${m#*:} timeout 100 $NCU --clock-control none --kernel-name regex:state --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --metrics "$MET" \
        python3 $D/ncu_drive.py B2-T8192-H32 2>&1 | grep -v -i "==warn" > $R/ncu_${m%%:*}.txt
    echo "ncu ${m%%:*} rc=$?"
done
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest.txt | cut -c1-300
cat $R/bench.txt | cut -c1-400
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "Duration|lts__|l1tex__|inst_executed|dram__|stalled" $f | cut -c1-120; done

# Device call 1 (one H200): the 64-token recurrence with two consumer warpgroups per CTA (-DKDA_STATE64_WGS=2, a CTA
# per head, w / qg / kg / Aqk loaded once for both 64-column halves, 2 stages) against one (3 stages): sm90_v2's GPU
# tests with two, kernel times of both at B2 T8192 H32 and B1 T8192 H96; then ncu (clocks left alone) of the state
# kernels at B2 T8192 H32: 64-token with one and two warpgroups, Triton's 64-token pass, the default 16-token one.
# Carried: .cuda_cache (this tree's library with one and with two warpgroups, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_state64
S=docs/benchmarks/runs/2026-11-28_state64/state64_times.py
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats"
prof() {  # name, env...
    local name=$1; shift
    env "$@" timeout 120 $NCU --clock-control none --kernel-name regex:state --launch-skip 2 --launch-count 1 $SEC \
        python3 $D/ncu_drive.py B2-T8192-H32 2>&1 | grep -v -i "==warn" > $R/ncu_$name.txt
    echo "ncu $name rc=$?"
}
timeout 60 python3 $S --modes sm90,sm90_v2,triton > $R/times_1wg.txt 2>&1; echo "rc=$?" >> $R/times_1wg.txt
prof v2_1wg TRITON_KDA_SM90_FWD=v2
prof triton TRITON_KDA_SM90=0
prof sm90
export TRITON_KDA_NVCC_FLAGS="-DKDA_STATE64_WGS=2"
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs -x tests/test_cuda_sm90_v2.py > $R/pytest_2wg.txt 2>&1
echo "rc=$?" >> $R/pytest_2wg.txt
timeout 50 python3 $S --modes sm90_v2 > $R/times_2wg.txt 2>&1; echo "rc=$?" >> $R/times_2wg.txt
prof v2_2wg TRITON_KDA_SM90_FWD=v2
grep -E "^FAILED|passed|failed|rc=|Error" $R/pytest_2wg.txt | cut -c1-300
for f in times_1wg times_2wg; do echo "== $f"; grep -E " us;|state|rc=|Error" $R/$f.txt | cut -c1-110; done
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "state|Duration|DRAM Through|Memory Through|Compute \(SM\)|Registers|Achieved Occ|L2 Hit|L1/TEX Hit|Warp Cycles Per Issued" $f | cut -c1-120 | head -16; done

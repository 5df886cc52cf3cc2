# Device call 5 (one H200): call 4's kernel with the anchored q in shared memory (over q in Q; k e^{G} formed there
# after the column blocks) instead of 32 registers, and the exact path inline with rolled loops:
# sm90_v2's GPU tests, intra64_bench.py and ncu's stall reasons and local-memory bytes.
# Carried: .cuda_cache (this tree's libraries, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_intra64
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_cuda_sm90_v2.py > $R/pytest.txt 2>&1
echo "rc=$?" >> $R/pytest.txt
grep -E "^FAILED|^E  |passed|failed|rc=" $R/pytest.txt | cut -c1-400 | head -30
timeout 100 python3 $D/intra64_bench.py --shapes B2-T8192-H32,B1-T8192-H96,B4-T4096-H16 > $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
TRITON_KDA_SM90_FWD=v2 timeout 200 $NCU --clock-control none --kernel-name regex:intra64 --launch-skip 2 --launch-count 1 \
  --metrics "$MET" --csv --page raw --print-units base python3 docs/benchmarks/runs/2026-11-29_state64/ncu_drive.py \
  B2-T8192-H32 > $R/ncu.csv 2> $R/ncu.err; echo "ncu rc=$?"; tail -2 $R/ncu.err
python3 - $R/ncu.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, data = rows[0], rows[2:]
for r in data:
    for n, x in zip(head, r):
        if "__" in n and not n.startswith(("device__", "launch__", "nvlink__", "numa__", "profiler__")):
            try:
                val = float(x.replace(",", ""))
            except ValueError:
                continue
            if n.endswith(".sum") or ("stalled" in n and val >= 0.05) or "pct" in n:
                print(f"{n.replace('smsp__average_warps_issue_stalled_', 'stall ')}: {val:.4g}")
PY

# Device call 9 (one H200): call 8's per-kernel ncu metrics again, over the no-grad forward and over a training step
# with the gradients reset before each step (ncu_step.py; call 8 accumulated them).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
for m in fwd step; do
timeout 200 $NCU --profile-from-start off --clock-control none --metrics "$MET" --csv --page raw --print-units base \
    python3 docs/benchmarks/runs/2026-11-29_state64/ncu_step.py B2-T8192-H32 $([ $m = fwd ] && echo --fwd) \
    > $R/ncu_$m.csv 2> $R/ncu_$m.err
echo "ncu $m rc=$?"; tail -3 $R/ncu_$m.err
python3 - $R/ncu_$m.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, units, data = rows[0], rows[1], rows[2:]
col = {n: i for i, n in enumerate(head)}
def v(r, n):
    try: return float(r[col[n]].replace(",", ""))
    except Exception: return float("nan")
print("kernel | us | DRAM MB | L2 MB | rd sect/req | wr sect/req | bank confl / wavefronts | warps % | Minst")
for r in data:
    rq, sc = v(r, "lts__t_requests_srcunit_tex_op_read.sum"), v(r, "lts__t_sectors_srcunit_tex_op_read.sum")
    wq, ws = v(r, "lts__t_requests_srcunit_tex_op_write.sum"), v(r, "lts__t_sectors_srcunit_tex_op_write.sum")
    print(f"{r[col['Kernel Name']][:60]} | {v(r, 'gpu__time_duration.sum') / 1e3:.0f} | "
          f"{(v(r, 'dram__bytes_read.sum') + v(r, 'dram__bytes_write.sum')) / 1e6:.0f} | {v(r, 'lts__t_bytes.sum') / 1e6:.0f} | "
          f"{sc / max(rq, 1):.2f} | {ws / max(wq, 1):.2f} | {v(r, 'l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum') / 1e6:.1f}M / "
          f"{v(r, 'l1tex__data_pipe_lsu_wavefronts_mem_shared.sum') / 1e6:.1f}M | {v(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'):.0f} | "
          f"{v(r, 'smsp__inst_executed.sum') / 1e6:.0f}")
PY
done

# Device call 8 (one H200): where else a kernel's copies might split into partial-sector L2 requests: ncu over one
# bf16 training step at B2 T8192 H32 (Kimi flags, default dispatch): per kernel its time, DRAM bytes, L2 bytes, read /
# write requests and sectors, shared-memory bank conflicts, occupancy and instructions (ncu_step.py).
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
timeout 400 $NCU --profile-from-start off --clock-control none --metrics "$MET" --csv --page raw --print-units base \
    python3 docs/benchmarks/runs/2026-11-29_state64/ncu_step.py B2-T8192-H32 > $R/ncu_step.csv 2> $R/ncu_step.err
echo "ncu rc=$?"; tail -3 $R/ncu_step.err
python3 - $R/ncu_step.csv <<'PY'
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

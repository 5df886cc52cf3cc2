# Device call 7 (one H200): the one row where call 6 timed the wgmma recurrence's forward behind mma.sync's (kimi
# B1 T4096 H32: 488.7 vs 482.1 us, while benchmarks.run timed the default at 276 us there): kernel times of both
# recurrences at that shape (torch.profiler) and the kimi suite with each recurrence, twice.
# Carried: .cuda_cache (this tree's library, nvcc 13.0, sm_90a).
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
timeout 60 python3 docs/benchmarks/runs/2026-11-28_state64/state64_times.py --shapes B1-T4096-H32,B1-T8192-H32 \
    --modes sm90,sm90-wgmma16 > $R/times.txt 2>&1; echo "rc=$?" >> $R/times.txt
for i in 1 2; do timeout 60 python3 docs/benchmarks/runs/2026-11-29_state64/state_modes.py --suites kimi > $R/kimi_$i.md 2>&1; echo "rc=$?" >> $R/kimi_$i.md; done
grep -E " us|rc=" $R/times.txt | cut -c1-110
cat $R/kimi_1.md $R/kimi_2.md | grep -E "^\| kimi|rc="

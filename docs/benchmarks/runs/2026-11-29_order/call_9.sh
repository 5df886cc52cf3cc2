# Device call 9 (one H200): sm90_split with the compiled 64-token recurrence over the pieces
# (TRITON_KDA_SM90_SPLIT=state64) at forced piece lengths (TRITON_KDA_INTRACARD_CP_CHUNKS, 64-token chunks) against the
# planner's (printed first), two alternating timings. Carried: .cuda_cache.
export PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
R=$OUT/r; mkdir -p $R
D=docs/benchmarks/runs/2026-11-29_order
python3 -c "
import torch
from triton_kda.state_cp import piece_chunks
for T in (32768, 65536, 131072): print('planner: T', T, 'H8 piece length', piece_chunks((T,), 64, 8, 128, 128, 2, torch.device('cuda')), 'chunks')
" > $R/bench.txt 2>&1
S=TRITON_KDA_SM90_SPLIT=state64
timeout 200 python3 $D/env_bench.py --shapes B1-T32768-H8,B1-T131072-H8 --repeat 2 \
   --envs "$S;$S,TRITON_KDA_INTRACARD_CP_CHUNKS=16;$S,TRITON_KDA_INTRACARD_CP_CHUNKS=32;$S,TRITON_KDA_INTRACARD_CP_CHUNKS=64;$S,TRITON_KDA_INTRACARD_CP_CHUNKS=128" \
   >> $R/bench.txt 2>&1
echo "rc=$?" >> $R/bench.txt; cat $R/bench.txt

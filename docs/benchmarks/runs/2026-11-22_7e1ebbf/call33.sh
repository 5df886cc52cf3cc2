# 2026-11-22 (committed with 7cf8f69): headdim suite (K=V=64, 256) with the table's configs next to fla, then ours with TRITON_KDA_AUTOTUNE=1
. .dev/calls/common.sh
mkdir -p $OUT/table $OUT/tuned
timeout 270 python3 -m benchmarks.run --suite headdim --modes fwd,fwdbwd --impl triton,fla --flags kimi --tune-cache /tmp/o/t --out $OUT/table > $OUT/table.log 2>&1; grep -E "ms \[" $OUT/table.log | cut -c1-120
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; save(Path('/tmp/o/t'))"
TRITON_KDA_AUTOTUNE=1 timeout 270 python3 -c "
import logging, runpy, sys
logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s')
logging.getLogger().handlers[0].addFilter(lambda r: r.name.startswith('triton_kda'))
sys.argv = ['benchmarks.run', '--suite', 'headdim', '--modes', 'fwd,fwdbwd', '--impl', 'triton', '--flags', 'kimi', '--out', '$OUT/tuned']
runpy.run_module('benchmarks.run', run_name='__main__')
" > $OUT/tuned.log 2>&1; grep -E "ms \[|autotune" $OUT/tuned.log | cut -c1-160 | tail -40

# 2026-11-22, at 7e1ebbf: fp32 suite with the committed tf32x3 change, ours next to fla (same process), and the fp32 GPU tests
. .dev/calls/common.sh
mkdir -p $OUT/bench
timeout 300 python3 -m benchmarks.run --suite fp32 --modes fwd,fwdbwd --impl triton,fla --flags kimi --tune-cache /tmp/o/t --out $OUT/bench > $OUT/bench.log 2>&1; grep -E "ms \[|error|Error" $OUT/bench.log | tail -8
python3 -c "from pathlib import Path; from benchmarks.tune_cache import save; save(Path('/tmp/o/t'))"
( timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_chunk_fwd.py tests/test_chunk_bwd.py -k fp32 2>&1 | tail -4 ) > $OUT/pytest.txt; cat $OUT/pytest.txt

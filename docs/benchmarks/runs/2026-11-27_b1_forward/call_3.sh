# After the rule (the sm90 forward declines N*HV*4 <= SMs / 2 over >= 4096 tokens): the sm90 GPU tests, then the
# standard suite's B1 T8192 H16 forward against fla in one process (fla's tuning restored).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
timeout 150 python3 -m pytest -q tests/test_cuda_sm90.py -p no:cacheprovider > $R/tests.txt 2>&1; tail -2 $R/tests.txt
timeout 200 python3 -m benchmarks.run --suite standard --shapes B1-T8192-H16 --impl auto,fla --modes fwd \
  --tune-cache benchmarks/fla_tune --out $R/rows > $R/run.txt 2>&1
grep -E " fwd " $R/run.txt | cut -c1-160

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache_all PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
timeout 200 python3 -m pytest -x -q tests/test_cuda_sm90_intra.py > $R/t_intra.txt 2>&1; tail -30 $R/t_intra.txt
for s in B2-T8192-H32 B2-T8192-H8-HV64 B2-T8192-H16-K256; do
  timeout 100 python3 -m benchmarks.roofline --shape $s --pkg off=.:triton_kda@TRITON_KDA_SM90_INTRA=0 --pkg on=.:triton_kda@TRITON_KDA_SM90_INTRA=1 2>&1 | grep -v -i warn > $R/roofline_$s.txt
  grep -E "intra|summary|total" $R/roofline_$s.txt | cut -c1-160
done

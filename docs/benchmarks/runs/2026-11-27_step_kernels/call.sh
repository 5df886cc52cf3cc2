# Per-kernel times and floors of a bf16 training step at HEAD on one H100 (benchmarks.roofline with kept launches
# counted), K = V = 128, GVA H8 / HV64 and K = V = 256.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=index,name --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
for s in B2-T8192-H32 B2-T8192-H8-HV64 B2-T8192-H16-K256; do
  timeout 120 python3 -m benchmarks.roofline --shape $s 2>&1 | grep -v -i warn > $R/roofline_$s.txt
  grep -E "^\| head|summary" $R/roofline_$s.txt | cut -c1-120
done

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc
S=docs/benchmarks/scripts
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
timeout 300 ncu --clock-control none --profile-from-start off -k regex:_kda --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis python3 $S/ncu_step.py --shape B1-T8192-H16 --dtype fp32 > $OUT/r/ncu_fp32.txt 2>&1
echo "rc=$?" >> $OUT/r/ncu_fp32.txt
grep -E "^  _kda|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|L2 Hit|Stall" $OUT/r/ncu_fp32.txt | head -80
cd $OUT && tar czf r.tgz r && rm -rf r

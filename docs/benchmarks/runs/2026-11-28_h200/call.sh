# Device call: the wheel built on the CPU machine (`pip wheel . -w dist --no-deps`, system nvcc 13.0, sm_90a and
# sm_100a) installed into a fresh venv (torch and triton through a .pth naming the machine's torch site: it has no
# network) and run
# with no nvcc reachable (PATH stripped of every CUDA bin directory, CUDA_HOME and CUDA_PATH unset, an empty build
# cache), then the source tree with the nvcc build cache (.cuda_cache, built on the CPU machine with the same nvcc);
# outputs compared bit for bit. Carried: dist/ (the wheel), .cuda_cache.
R=$OUT/wheel; mkdir -p $R; REPO=$PWD
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $R/gpu.txt
python3 -m venv /tmp/wv
python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" \
  > "$(/tmp/wv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torch_site.pth"
/tmp/wv/bin/pip install -q --no-index --no-deps dist/triton_kda-*.whl 2>&1 | tail -2
NOCUDA_PATH=$(echo "$PATH" | tr ':' '\n' | grep -vi cuda | paste -sd:)
(cd /tmp && env -u CUDA_HOME -u CUDA_PATH PATH=/tmp/wv/bin:$NOCUDA_PATH TRITON_KDA_CUDA_CACHE=/tmp/empty_cache \
   TRITON_CACHE_DIR=/tmp/tc_wheel bash -c 'echo "nvcc: $(command -v nvcc || echo none)"; \
   python -c "import cuda_fast, os; print(\"cuda_fast from\", os.path.dirname(cuda_fast.__file__))"; \
   python '"$REPO"'/docs/benchmarks/runs/2026-11-28_h200/wheel_check.py /tmp/packaged.pt') 2>&1 | tee $R/packaged.txt
PYTHONPATH=$PWD TRITON_KDA_CUDA_CACHE=$PWD/.cuda_cache TRITON_CACHE_DIR=/tmp/tc_built \
  python3 docs/benchmarks/runs/2026-11-28_h200/wheel_check.py /tmp/built.pt 2>&1 | tee $R/built.txt
python3 docs/benchmarks/runs/2026-11-28_h200/wheel_check.py --compare /tmp/packaged.pt /tmp/built.pt 2>&1 | tee $R/compare.txt

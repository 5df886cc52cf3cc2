python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name --format=csv,noheader
# BC = 32 map launches (K = 256 bf16 takes them; K = 128 bf16 faulted in call 1's first sweep), old and new kernels
for c in "old fwd 128 32 8 1" "new fwd 128 32 8 1" "old bwd 128 32 8 1" "new bwd 128 32 8 1" "old fwd 256 32 8 1" "new fwd 256 32 8 1" "old bwd 256 32 8 1" "new bwd 256 32 8 1"; do
  echo "$c: $(timeout 60 python3 .calls/bc_probe.py $c 2>&1 | grep -v -i warn | tail -1 | cut -c1-120)"
done
python3 - <<'PY'
import torch, glob
for k in (128, 256):
    for w in ("fwd", "bwd"):
        try:
            a = torch.load(f"/tmp/maps_old_{w}_{k}_32_8_1.pt"); b = torch.load(f"/tmp/maps_new_{w}_{k}_32_8_1.pt")
            print(w, k, "max |new - old|", float((a - b).abs().max()))
        except Exception as e:
            print(w, k, "compare:", type(e).__name__)
PY

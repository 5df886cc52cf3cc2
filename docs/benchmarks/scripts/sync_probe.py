"""Per package: host-device syncs in one fwd+bwd step (torch sync debug mode, with the call site), host time per step
(launch loop without synchronising), wall time per step and do_bench, at B1 T8192 H16 and B2 T8192 H32 bf16, Kimi
flags. `python3 docs/benchmarks/scripts/sync_probe.py NAME=DIR:MODULE ...` (packages as bwd_variants.py takes them)."""
import importlib, sys, time, warnings, os
import torch
from triton.testing import do_bench
sys.path.insert(0, os.getcwd()); sys.path.insert(0, "docs/benchmarks/scripts")
from bwd_before_after import inputs, step
for spec in sys.argv[1:]:
    name, where = spec.split("=", 1); path, mod = where.split(":", 1)
    sys.path.insert(0, os.path.abspath(path))
    fn = importlib.import_module(mod).chunk_kda
    for shape in ((1, 8192, 16), (2, 8192, 32)):
        d = inputs(*shape, torch.bfloat16); do = torch.randn_like(d["v"])
        for _ in range(3): step(fn, d, do)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            step(fn, d, do)
        torch.cuda.set_sync_debug_mode(0)
        sites = []
        for x in w:
            sites.append(f"{x.filename}:{x.lineno} {str(x.message)[:60]}")
        torch.cuda.synchronize()
        t = time.perf_counter(); n = 20
        for _ in range(n): step(fn, d, do)
        host = (time.perf_counter() - t) / n * 1e3
        torch.cuda.synchronize(); wall = (time.perf_counter() - t) / n * 1e3
        ms = do_bench(lambda: step(fn, d, do), warmup=20, rep=200, grad_to_none=list(d.values()))
        print(f"{name} B{shape[0]}-T{shape[1]}-H{shape[2]}: syncs {len(w)}, host loop {host:.2f} ms/step, wall {wall:.2f}, do_bench {ms:.3f}", flush=True)
        for s in sites[:5]: print("   ", s)

"""One fwd+bwd of chunk_kda per case, each in its own process with CUDA_LAUNCH_BLOCKING=1, to find which kernel
faults: a fault surfaces at the next kernel's module load, so the last triton_kda frame names the launch after it.
python3 fault_probe.py"""
import os
import subprocess
import sys

CASES = [
    ("fp32", dict(B=2, T=70, H=1, HV=2, K=32, V=16), "strong", True),
    ("fp32", dict(B=1, T=70, H=1, HV=2, K=32, V=16), "strong", False),
    ("fp32", dict(B=1, T=70, H=1, HV=2, K=16, V=16), None, False),
    ("fp32", dict(B=1, T=70, H=1, HV=2, K=64, V=64), None, False),
    ("fp32", dict(B=1, T=70, H=1, HV=2, K=128, V=128), None, False),
    ("fp32", dict(B=1, T=256, H=1, HV=2, K=128, V=128), None, False),
    ("fp32", dict(B=2, T=70, H=1, HV=2, K=64, V=16), "strong", True),
    ("fp32", dict(B=1, T=200, H=2, HV=4, K=64, V=32), "strong", True),
    ("fp32", dict(B=1, T=200, H=1, HV=2, K=96, V=48), None, True),
    ("fp16", dict(B=1, T=70, H=1, HV=2, K=32, V=16), None, False),
    ("bf16", dict(B=1, T=70, H=1, HV=2, K=32, V=16), None, False),
]


def run_case(i: int) -> None:
    import torch

    sys.path.insert(0, ".")
    from reference.harness import make_inputs
    from triton_kda import chunk_kda

    dt, shape, gate, state = CASES[i]
    dtype = dict(fp32=torch.float32, fp16=torch.float16, bf16=torch.bfloat16)[dt]
    d = make_inputs(**shape, dtype=dtype, device="cuda", gate=gate, initial_state=state, output_final_state=state)
    for n in ("q", "k", "v", "g", "beta"):
        d[n].requires_grad_(True)
    o, _ = chunk_kda(**d)
    o.float().sum().backward()
    torch.cuda.synchronize()


def main():
    if len(sys.argv) > 1:
        run_case(int(sys.argv[1]))
        return
    for i, case in enumerate(CASES):
        r = subprocess.run([sys.executable, __file__, str(i)], capture_output=True, text=True,
                           env=dict(os.environ, CUDA_LAUNCH_BLOCKING="1"), timeout=300)
        lines = [x for x in (r.stdout + r.stderr).splitlines() if "triton_kda/" in x or "Error" in x][-4:]
        if r.returncode == 0:
            print(i, case, "OK", flush=True)
        else:
            print(i, case, "FAIL", *lines, sep="\n   ", flush=True)


if __name__ == "__main__":
    main()

"""Where the fp32 forward's w and u (`intra_fwd`) and the backward's recompute of them (`wy_recompute`) differ, on
tests/test_chunk_bwd.py's DETERMINISM cases: elements and rows that differ per chunk, and each one's max error
against u = Akk (beta v) in fp64 from the saved Akk.

    PYTHONPATH=. python3 docs/benchmarks/scripts/wu_probe.py      (a GPU; the interpreter gives identical tensors)
"""
import torch
import triton_kda.ops as O
from tests.test_chunk_bwd import DETERMINISM, _cotangents, _inputs, _kernel_grads

captured = []
chunk_bwd = O.chunk_bwd


def spy(do, dht, q, k, v, g, beta, a_log, dt, intra, h, v_new, plan, BT, *args, **kwargs):
    captured.append((intra, plan, BT))
    return chunk_bwd(do, dht, q, k, v, g, beta, a_log, dt, intra, h, v_new, plan, BT, *args, **kwargs)


O.chunk_bwd = spy
for params in DETERMINISM:
    captured.clear()
    d, chunk_size, _ = _inputs(params, torch.float32, seed=3)
    do, dht = _cotangents(d, seed=3)
    _kernel_grads(d, chunk_size, False, do, dht)
    _kernel_grads(d, chunk_size, True, do, dht)
    (rec, plan, BT), (keep, _, _) = captured
    v = d["v"].detach().flatten(0, 1)
    print(f"case T{params['T']}: Akk equal {torch.equal(rec.Akk, keep.Akk)}, beta equal {torch.equal(rec.beta, keep.beta)}")
    ci = plan.chunk_indices.cpu().tolist()
    cu = plan.cu_seqlens.cpu().tolist()
    for name in ("u", "w"):
        a, b = rec._asdict()[name], keep._asdict()[name]
        diff = (a - b).abs()
        print(f"  {name}: differing elements {int((diff > 0).sum())} of {diff.numel()}, max {float(diff.max()):.3e}")
        if name == "u":
            errs = {"recompute": [], "keep": []}
            for i_n, i_c in ci:
                bos, eos = cu[i_n], cu[i_n + 1]
                t0 = bos + i_c * BT
                n = min(eos - t0, BT)
                X = keep.Akk[t0:t0 + n, :, :n].double().permute(1, 0, 2)  # [HV, n, n]
                op = (v[t0:t0 + n].double() * keep.beta[t0:t0 + n, :, None].double()).permute(1, 0, 2)
                ref = (X @ op).permute(1, 0, 2)
                dchunk = diff[t0:t0 + n]
                rows = (dchunk.amax(dim=(1, 2)) > 0).nonzero().flatten().tolist()
                for lab, t in (("recompute", a), ("keep", b)):
                    errs[lab].append(float((t[t0:t0 + n].double() - ref).abs().max()))
                print(f"    seq {i_n} chunk {i_c} n={n}: rows differing {rows[:12]}{'...' if len(rows) > 12 else ''}; "
                      f"max err vs fp64 recompute {errs['recompute'][-1]:.2e} keep {errs['keep'][-1]:.2e}")

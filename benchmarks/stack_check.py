"""One-command GPU check of the stacks people run: torch.compile, CUDA graphs and fla's KDA layer.

    python -m benchmarks.stack_check --out DIR

1. compile: a small KDA block (`KDABlock`: projections, chunk_kda with Kimi's flags, gated RMS norm, output
   projection) under inductor with fullgraph=True against eager, forward and forward+backward: graph breaks, time
   of the first calls (compiling), the worst error of each against the fp32 eager block (compiled must stay within
   1.5x eager's), median times (compiled must not be slower than eager, 2% noise allowed).
2. graphs: chunk_kda captured with `torch.cuda.graph` (forward under inference mode, and forward+backward through
   `torch.autograd.grad`), fixed length and varlen with cu_seqlens_cpu, replayed on new inputs: bit-identical to
   eager on the same inputs, and the replay time next to eager's.
3. fla: fla's `KimiDeltaAttention` layer forward+backward with fla's kernels and with the triton_kda plug-in
   (`triton_kda.integrations.fla`), next to `fla.ops.kda.chunk_kda` vs `triton_kda.chunk_kda` at the layer's shapes
   and flags: the layer's saving against the op's, the plug-in's accept/serve counts, and whether the layer with the
   plug-in gives what it gives calling triton_kda directly (output bit-identical; gradients within the difference
   of two identical direct runs, since fla's own conv and norm kernels need not be bit-reproducible). Then the
   layer and a 2-layer `KDAForCausalLM` forward+backward against fp64 (an fp32 copy whose KDA calls run in the
   fp64 oracle): the plug-in's errors (output or loss, dx, all parameter gradients) must be at most FP64_MARGIN
   times those of fla's kernels; and the model's step time both ways. fla tunes its kernels on its first call
   (minutes): one small shape only; `--tune-cache DIR` keeps the tuning between runs, `--no-fla` skips the
   section. `--only SECTION` runs one section.

Writes DIR/stack_check.md and DIR/stack_check.json; the summary is printed last.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from triton_kda import chunk_kda

FP64_MARGIN = 1.05  # the plug-in's error against fp64 at most this times fla's (pooled over two seeds)
KIMI = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
            lower_bound=-5.0)


class KDABlock(torch.nn.Module):
    """A small KDA block as a model runs it: x ``[B, T, D]`` -> q, k ``[B, T, H, K]`` (silu), v ``[B, T, HV, K]``
    (silu), raw gate ``[B, T, HV, K]``, beta logits ``[B, T, HV]`` -> chunk_kda with Kimi's flags (in-kernel l2norm,
    gate with lower bound, beta sigmoid) -> RMS norm gated by sigmoid of a projection -> ``[B, T, D]``."""

    def __init__(self, D: int, H: int, K: int, HV: int | None = None):
        super().__init__()
        self.H, self.HV, self.K = H, HV or H, K
        self.q_proj = torch.nn.Linear(D, H * K, bias=False)
        self.k_proj = torch.nn.Linear(D, H * K, bias=False)
        self.v_proj = torch.nn.Linear(D, self.HV * K, bias=False)
        self.f_proj = torch.nn.Linear(D, self.HV * K, bias=False)
        self.b_proj = torch.nn.Linear(D, self.HV, bias=False)
        self.g_proj = torch.nn.Linear(D, self.HV * K, bias=False)
        self.A_log = torch.nn.Parameter(torch.zeros(self.HV))
        self.dt_bias = torch.nn.Parameter(torch.zeros(self.HV * K))
        self.norm = torch.nn.RMSNorm(K, eps=1e-5)
        self.o_proj = torch.nn.Linear(self.HV * K, D, bias=False)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                cu_seqlens_cpu: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        H, HV, K = self.H, self.HV, self.K
        q = F.silu(self.q_proj(x)).view(B, T, H, K)
        k = F.silu(self.k_proj(x)).view(B, T, H, K)
        v = F.silu(self.v_proj(x)).view(B, T, HV, K)
        o, _ = chunk_kda(q, k, v, self.f_proj(x).view(B, T, HV, K), self.b_proj(x), A_log=self.A_log,
                         dt_bias=self.dt_bias, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, **KIMI)
        o = self.norm(o) * torch.sigmoid(self.g_proj(x).view(B, T, HV, K))
        return self.o_proj(o.reshape(B, T, HV * K))


def block_grads(block: torch.nn.Module, fn, x: torch.Tensor, dy: torch.Tensor) -> list[torch.Tensor]:
    """[y, dx, d(every parameter)] of one forward+backward of fn(x) with upstream gradient dy (zeros for a parameter
    fn does not use)."""
    x = x.detach().requires_grad_(True)
    y = fn(x)
    params = list(block.parameters())
    return [y.detach(), *torch.autograd.grad(y, [x, *params], dy, allow_unused=True, materialize_grads=True)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _bench(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def compile_errors(block32: torch.nn.Module, dtype: torch.dtype, x32: torch.Tensor, dy32: torch.Tensor,
                   compiled_fn=None) -> dict:
    """Forward+backward of the block in `dtype`, eager and compiled (`compiled_fn(block)`, default
    torch.compile(fullgraph=True)), each against the fp32 eager block: the worst relative error over the output
    and every gradient, eager's and compiled's, and the compiled block."""
    block = copy.deepcopy(block32).to(dtype)
    x, dy = x32.to(dtype), dy32.to(dtype)
    compiled = (compiled_fn or (lambda b: torch.compile(b, fullgraph=True)))(block)
    ref = block_grads(block32, block32, x32, dy32)
    got = {"compiled": block_grads(block, compiled, x, dy), "eager": block_grads(block, block, x, dy)}
    err = {name: max(rel_err(a, b) for a, b in zip(g, ref, strict=True)) for name, g in got.items()}
    return dict(eager_err=err["eager"], compiled_err=err["compiled"],
                compiled_vs_eager=max(rel_err(a, b) for a, b in zip(got["compiled"], got["eager"], strict=True)),
                block=block, compiled=compiled)


def check_compile(args, dev) -> dict:
    from torch._dynamo.utils import counters

    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    block32 = KDABlock(args.D, args.H, args.K).to(dev)
    x32 = torch.randn(args.B, args.T, args.D, device=dev)
    dy32 = torch.randn_like(x32)
    counters.clear()
    t0 = time.perf_counter()
    e = compile_errors(block32, dtype, x32, dy32)
    compile_s = time.perf_counter() - t0
    block, compiled = e.pop("block"), e.pop("compiled")
    x, dy = x32.to(dtype), dy32.to(dtype)
    xg = x.detach().requires_grad_(True)
    times = {}
    for name, fn in (("eager", block), ("compiled", compiled)):
        with torch.no_grad():
            times[f"{name}_fwd_ms"] = _bench(lambda fn=fn: fn(x))
        times[f"{name}_fwdbwd_ms"] = _bench(lambda fn=fn: fn(xg).backward(dy))
    return dict(graph_breaks=sum(counters["graph_break"].values()), first_calls_s=compile_s, **e, **times)


def _graph_inputs(args, dev, seed: int, varlen: bool) -> dict:
    """Kimi-flag chunk_kda inputs with an initial state: [B, T] fixed length, or B * T tokens in 4 sequences."""
    from reference.harness import make_inputs

    T = args.T * args.B if varlen else args.T
    seqlens = None
    if varlen:
        cuts = sorted(torch.randint(0, T, (3,), generator=torch.Generator().manual_seed(1)).tolist())
        seqlens = [b - a for a, b in zip([0, *cuts], [*cuts, T], strict=True)]
    d = make_inputs(1 if varlen else args.B, T, args.H, args.H, args.K, args.K, dtype=getattr(torch, args.dtype),
                    device=dev, seqlens=seqlens, initial_state=True, output_final_state=True, seed=seed,
                    gate="raw", **{k: v for k, v in KIMI.items() if k != "safe_gate"})
    d["safe_gate"] = True
    return d


_GRAD_NAMES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def _fwd_bwd(d: dict, do: torch.Tensor, dht: torch.Tensor) -> list[torch.Tensor]:
    leaves = {n: d[n].detach().requires_grad_(True) for n in _GRAD_NAMES}
    o, ht = chunk_kda(**{**d, **leaves})
    return [o, ht, *torch.autograd.grad((o, ht), list(leaves.values()), (do, dht))]


def capture(step, static: dict):
    """Warm up `step(static)` on a side stream, capture it into a CUDA graph; returns (graph, static outputs)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step(static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(static)
    return graph, out


def replay_matches_eager(step, fresh, dev):
    """Capture `step` on fresh(0), replay it on fresh(1) copied into the static inputs; returns (whether the replay
    is bit-identical to eager `step(fresh(1))`, the graph, fresh(1))."""
    static = fresh(0)
    graph, out = capture(step, static)
    new = fresh(1)
    for name, t in new.items():
        if isinstance(t, torch.Tensor) and t.device.type == dev.type:
            static[name].copy_(t)
    graph.replay()
    torch.cuda.synchronize()
    ref = step(new)
    return all(torch.equal(a, b) for a, b in zip(out, ref, strict=True)), graph, new


def graph_inputs(args, dev, varlen: bool):
    """fresh(seed) -> chunk_kda kwargs (Kimi's flags, initial state) plus upstream gradients do, dht."""
    def fresh(seed):
        d = _graph_inputs(args, dev, seed, varlen)
        g = torch.Generator(device=dev).manual_seed(seed + 100)
        d["do"] = torch.randn(d["v"].shape, device=dev, generator=g).to(d["v"].dtype)
        d["dht"] = torch.randn(d["initial_state"].shape, device=dev, generator=g)
        return d
    return fresh


def graph_forward(d):
    with torch.inference_mode():
        return list(chunk_kda(**{k: v for k, v in d.items() if k not in ("do", "dht")}))


def graph_forward_backward(d):
    return _fwd_bwd({k: v for k, v in d.items() if k not in ("do", "dht")}, d["do"], d["dht"])


def check_graphs(args, dev) -> list[dict]:
    rows = []
    for varlen in (False, True):
        for mode, step in (("forward", graph_forward), ("forward+backward", graph_forward_backward)):
            same, graph, new = replay_matches_eager(step, graph_inputs(args, dev, varlen), dev)
            rows.append(dict(case="varlen (cu_seqlens_cpu)" if varlen else "fixed length", mode=mode,
                             bit_identical=same, replay_ms=_bench(graph.replay),
                             eager_ms=_bench(lambda step=step, new=new: step(new))))
    return rows


def fla_layer(args, dev):
    """fla's KimiDeltaAttention (safe gate, lower bound -5) at the args' sizes, an input x and an upstream dy."""
    from fla.layers import KimiDeltaAttention

    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    layer = KimiDeltaAttention(hidden_size=args.D, head_dim=args.K, num_heads=args.H, safe_gate=True,
                               lower_bound=-5.0).to(dev, dtype)
    x = torch.randn(args.B, args.T, args.D, device=dev, dtype=dtype)
    return layer, x, torch.randn_like(x)


def plugin_vs_direct(layer, x, dy) -> dict:
    """The layer forward+backward with the plug-in registered against the layer calling triton_kda.chunk_kda directly
    (as a code change would do); fla's own KDA kernels do not run. fla's conv and norm kernels need not be
    bit-reproducible, so the plug-in's gradients are held to the difference between two identical direct runs."""
    import fla.layers.kda as fla_layer_module

    import triton_kda
    from triton_kda.integrations import fla as plugin

    def layer_fn(h):
        return layer(h)[0]

    def direct():
        original = fla_layer_module.chunk_kda
        fla_layer_module.chunk_kda = triton_kda.chunk_kda
        try:
            return block_grads(layer, layer_fn, x, dy)
        finally:
            fla_layer_module.chunk_kda = original

    first, again = direct(), direct()
    was_registered = plugin.registered()
    plugin.register()
    plugin.reset_stats()
    try:
        via_plugin = block_grads(layer, layer_fn, x, dy)
        stats = plugin.stats()
    finally:
        if not was_registered:
            plugin.unregister()
    return dict(plugin_out_identical=torch.equal(via_plugin[0], first[0]),
                plugin_grad_rel_err=max(rel_err(a, b) for a, b in zip(via_plugin[1:], first[1:], strict=True)),
                direct_repeat_grad_rel_err=max(rel_err(a, b) for a, b in zip(again[1:], first[1:], strict=True)),
                **stats)


def oracle_kda(q, k, v, g, beta, **kwargs):
    """fla's `chunk_kda` call answered by the fp64 recurrent oracle (`reference.kda.kda_recurrent`); the output in
    q's dtype, differentiable through the oracle."""
    from reference.kda import kda_recurrent

    o, ht = kda_recurrent(q, k, v, g, beta, **kwargs)
    return o.to(q.dtype), ht


def errors_vs_oracle(module: torch.nn.Module, fn, inputs: list[tuple]) -> dict:
    """Relative errors (pooled over `inputs`, (x, dy) pairs) of fn(module, x)'s output, dx and the parameters'
    gradients (all of them as one vector; unused ones count as zeros), for `module` with fla's kernels and with the
    plug-in, against an fp32 copy of it whose KDA calls run in fp64 (`oracle_kda`); the worst single parameter's
    ratio of the two errors too."""
    import fla.layers.kda as fla_layer_module

    from triton_kda.integrations import fla as plugin

    def grads(m: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor) -> list[torch.Tensor]:
        return block_grads(m, lambda h: fn(m, h), x, dy)

    ref_module = copy.deepcopy(module).float()
    original = fla_layer_module.chunk_kda
    fla_layer_module.chunk_kda = oracle_kda
    try:
        refs = [grads(ref_module, x.float(), dy.float()) for x, dy in inputs]
    finally:
        fla_layer_module.chunk_kda = original
    runs = {"fla": [grads(module, x, dy) for x, dy in inputs]}
    plugin.register()
    try:
        runs["plugin"] = [grads(module, x, dy) for x, dy in inputs]
    finally:
        plugin.unregister()

    def pooled(name: str, pick) -> float:
        num = sum(float((pick(r).double() - pick(f).double()).norm() ** 2)
                  for r, f in zip(runs[name], refs, strict=True))
        return (num / max(sum(float(pick(f).double().norm() ** 2) for f in refs), 1e-300)) ** 0.5

    def params(t: list) -> torch.Tensor:
        return torch.cat([p.reshape(-1).float() for p in t[2:]])

    out = {}
    for name in runs:
        out[f"{name}_out_err"] = pooled(name, lambda t: t[0])
        out[f"{name}_dx_err"] = pooled(name, lambda t: t[1])
        out[f"{name}_dparams_err"] = pooled(name, params)
    used = [i for i in range(2, len(refs[0])) if any(f[i].abs().max() > 0 for f in refs)]
    out["worst_param_ratio"] = max(pooled("plugin", lambda t, i=i: t[i]) / max(pooled("fla", lambda t, i=i: t[i]),
                                                                               1e-30) for i in used)
    return out


def fla_model(args, dev):
    """A 2-layer fla KDAForCausalLM (KimiDeltaAttention layers at the args' sizes, vocabulary 4096), random token ids
    [B, T] and the mean next-token loss as a function of the input embeddings."""
    from fla.models import KDAConfig, KDAForCausalLM

    torch.manual_seed(0)
    config = KDAConfig(hidden_size=args.D, num_hidden_layers=2, num_heads=args.H, head_dim=args.K, vocab_size=4096,
                       safe_gate=True, lower_bound=-5.0, fuse_cross_entropy=False)
    model = KDAForCausalLM(config).to(dev, getattr(torch, args.dtype))
    ids = torch.randint(0, 4096, (args.B, args.T), device=dev)

    def loss_fn(m, embeds):
        logits = m(inputs_embeds=embeds).logits.float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    return model, model.get_input_embeddings()(ids).detach(), loss_fn


def check_fla_fp64(args, dev) -> dict:
    """fla's layer and a 2-layer model forward+backward with fla's kernels and with the plug-in, each against its
    fp32 copy with the KDA op in fp64 (two seeds), and the model's step time both ways."""
    from triton_kda.integrations import fla as plugin

    layer, _, _ = fla_layer(args, dev)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device=dev).manual_seed(1)
    inputs = [(torch.randn(args.B, args.T, args.D, device=dev, generator=gen).to(dtype),
               torch.randn(args.B, args.T, args.D, device=dev, generator=gen).to(dtype)) for _ in range(2)]
    rows = [dict(module="KimiDeltaAttention", **errors_vs_oracle(layer, lambda m, h: m(h)[0], inputs))]
    model, embeds, loss_fn = fla_model(args, dev)
    one = torch.ones((), device=dev)
    model_inputs = [(embeds, one), (embeds * 1.5, one)]
    rows.append(dict(module="KDAForCausalLM, 2 layers (loss)", **errors_vs_oracle(model, loss_fn, model_inputs)))
    x = embeds.detach().requires_grad_(True)

    def step():
        loss_fn(model, x).backward()

    step()
    times = {"fla": _bench(step)}
    plugin.register()
    try:
        step()
        times["plugin"] = _bench(step)
    finally:
        plugin.unregister()
    rows[-1].update(fla_step_ms=times["fla"], plugin_step_ms=times["plugin"], step_ratio=times["fla"] / times["plugin"])
    return dict(rows=rows)


def check_fla(args, dev) -> dict:
    from fla.ops.kda import chunk_kda as fla_chunk_kda

    import triton_kda
    from triton_kda.integrations import fla as plugin

    layer, x, dy = fla_layer(args, dev)
    result = plugin_vs_direct(layer, x, dy)
    xg = x.detach().requires_grad_(True)

    def layer_step():
        layer(xg)[0].backward(dy)

    t0 = time.perf_counter()
    layer_step()  # fla's kernels: the first call tunes them
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    fla_layer_ms = _bench(layer_step)
    plugin.register()
    try:
        ours_layer_ms = _bench(layer_step)
    finally:
        plugin.unregister()

    dtype = getattr(torch, args.dtype)
    H, K, B, T = args.H, args.K, args.B, args.T
    g = torch.Generator(device=dev).manual_seed(0)
    ins = {name: torch.randn(*shape, device=dev, generator=g).to(dtype).requires_grad_(True)
           for name, shape in (("q", (B, T, H, K)), ("k", (B, T, H, K)), ("v", (B, T, H, K)), ("g", (B, T, H, K)),
                               ("beta", (B, T, H)))}
    gate = dict(A_log=torch.zeros(H, device=dev, requires_grad=True),
                dt_bias=torch.zeros(H * K, device=dev, requires_grad=True), state_v_first=True, **KIMI)
    do = torch.randn(B, T, H, K, device=dev, dtype=dtype)
    op_ms = {name: _bench(lambda fn=fn: fn(**ins, **gate)[0].backward(do))
             for name, fn in (("fla", fla_chunk_kda), ("triton_kda", triton_kda.chunk_kda))}
    return dict(fla_first_call_s=first_call_s, fla_layer_ms=fla_layer_ms, plugin_layer_ms=ours_layer_ms,
                layer_ratio=fla_layer_ms / ours_layer_ms, fla_op_ms=op_ms["fla"], triton_kda_op_ms=op_ms["triton_kda"],
                op_ratio=op_ms["fla"] / op_ms["triton_kda"], layer_saving_ms=fla_layer_ms - ours_layer_ms,
                op_saving_ms=op_ms["fla"] - op_ms["triton_kda"], **result)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 or abs(value) >= 1e4 else f"{value:.3f}"
    return str(value)


def _table(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def summarize(results: dict) -> list[str]:
    """One line per section, each starting with PASS or FAIL (or SKIP) against what the stacks must reach."""
    lines = []
    c = results.get("compile")
    if c is not None:
        ok = (c["graph_breaks"] == 0 and c["compiled_fwdbwd_ms"] <= c["eager_fwdbwd_ms"] * 1.02
              and c["compiled_err"] <= 1.5 * c["eager_err"] + 1e-4)
        lines.append(f"{'PASS' if ok else 'FAIL'} compile: {c['graph_breaks']} graph breaks, fwd+bwd "
                     f"{c['compiled_fwdbwd_ms']:.3f} ms compiled vs {c['eager_fwdbwd_ms']:.3f} ms eager "
                     f"(forward {c['compiled_fwd_ms']:.3f} vs {c['eager_fwd_ms']:.3f}); worst error vs fp32 eager "
                     f"{c['compiled_err']:.2e} compiled, {c['eager_err']:.2e} eager")
    rows = results.get("graphs")
    if rows is not None:
        ok = all(r["bit_identical"] for r in rows)
        lines.append(f"{'PASS' if ok else 'FAIL'} graphs: {sum(r['bit_identical'] for r in rows)}/{len(rows)} "
                     f"captures replay bit-identical to eager")
    f = results.get("fla")
    if f is None:
        lines.append("SKIP fla: not run (--no-fla, or the run stopped before it)")
    elif "error" in f:
        lines.append(f"FAIL fla: {f['error']}")
    else:
        ok = (f["plugin_out_identical"] and f["plugin_grad_rel_err"] <= 2 * f["direct_repeat_grad_rel_err"]
              and f["accepted"] == f["served"] > 0 and f["declined"] == 0)
        lines.append(f"{'PASS' if ok else 'FAIL'} fla: KDA layer fwd+bwd {f['fla_layer_ms']:.3f} -> "
                     f"{f['plugin_layer_ms']:.3f} ms with the plug-in (x{f['layer_ratio']:.2f}, saves "
                     f"{f['layer_saving_ms']:.3f} ms; the op alone x{f['op_ratio']:.2f}, saves {f['op_saving_ms']:.3f} "
                     f"ms); plug-in served {f['served']} of {f['accepted']} accepted calls, declined {f['declined']}")
    for r in results.get("fla_fp64", {}).get("rows", []):
        errs = ("out", "dx", "dparams")
        ok = all(r[f"plugin_{e}_err"] <= FP64_MARGIN * r[f"fla_{e}_err"] for e in errs)
        step = f"; step {r['fla_step_ms']:.3f} -> {r['plugin_step_ms']:.3f} ms" if "fla_step_ms" in r else ""
        lines.append(f"{'PASS' if ok else 'FAIL'} fla vs fp64, {r['module']}: plug-in / fla error "
                     + ", ".join(f"{e} {r[f'plugin_{e}_err']:.2e} / {r[f'fla_{e}_err']:.2e}" for e in errs)
                     + f" (worst parameter x{r['worst_param_ratio']:.2f}){step}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stack_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "stack-check-out")))
    parser.add_argument("--B", type=int, default=2)
    parser.add_argument("--T", type=int, default=2048)
    parser.add_argument("--H", type=int, default=8)
    parser.add_argument("--K", type=int, default=128, help="head dim (K = V)")
    parser.add_argument("--D", type=int, default=1024, help="model width of the block and the layer")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--no-fla", action="store_true", help="skip the fla section")
    parser.add_argument("--only", choices=["compile", "graphs", "fla"], help="run this section alone")
    parser.add_argument("--tune-cache", type=Path, default=None, help="keep fla's tuning results in this folder")
    return parser


def write_report(out: Path, results: dict) -> list[str]:
    """Write DIR/stack_check.md and .json for the sections run so far; returns the summary lines."""
    lines = summarize(results)
    md = [f"# stack_check on {results['device']} (torch {results['torch']}, {results['shape']})", ""]
    if "compile" in results:
        md += ["## torch.compile (inductor, fullgraph) of KDABlock vs eager", "", _table([results["compile"]]), ""]
    if "graphs" in results:
        md += ["## CUDA graphs (chunk_kda)", "", _table(results["graphs"]), ""]
    if "fla" in results and "error" not in results["fla"]:
        md += ["## fla KimiDeltaAttention: fla's kernels vs the triton_kda plug-in", "", _table([results["fla"]]), ""]
    if "fla_fp64" in results:
        md += ["## fla's layer and a 2-layer model against fp64 (fp32 copy, KDA by the fp64 oracle), fla's kernels vs "
               "the plug-in", "", _table(results["fla_fp64"]["rows"]), ""]
    md += ["## Summary", "", *(f"- {line}" for line in lines), ""]
    (out / "stack_check.md").write_text("\n".join(md))
    (out / "stack_check.json").write_text(json.dumps(results, indent=1, default=str))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("stack_check needs a CUDA GPU")
    from benchmarks import tune_cache

    if args.tune_cache is not None:
        tune_cache.restore(args.tune_cache)
    dev = torch.device("cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                     "shape": dict(B=args.B, T=args.T, H=args.H, K=args.K, D=args.D, dtype=args.dtype)}
    # the report is rewritten after every section: a run stopped during fla's tuning keeps the others
    if args.only in (None, "compile"):
        results["compile"] = check_compile(args, dev)
        write_report(args.out, results)
    if args.only in (None, "graphs"):
        results["graphs"] = check_graphs(args, dev)
        write_report(args.out, results)
    if args.only in (None, "fla") and not args.no_fla:
        try:
            results["fla"] = check_fla(args, dev)
        except ImportError as error:
            results["fla"] = {"error": f"fla's layers are not importable ({error}): install flash-linear-attention"}
        if args.tune_cache is not None:
            tune_cache.save(args.tune_cache)
        if "error" not in results["fla"]:
            write_report(args.out, results)
            results["fla_fp64"] = check_fla_fp64(args, dev)
    lines = write_report(args.out, results)
    print("\n".join(lines))
    return 0 if all(not line.startswith("FAIL") for line in lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())

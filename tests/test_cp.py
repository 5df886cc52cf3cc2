"""Context parallel across ranks (triton_kda/cp.py): gloo process groups of 2 and 3 ranks on the CPU, each rank
running its slice through the interpreter, against the single-process result.

One spawned group per world size runs every case of that size in turn (process start and imports are the costly
part) and saves each rank's outputs and gradients; the test process computes the single-process results meanwhile
and compares: o, final states and every gradient (the ranks' shares of dA_log, ddt_bias and dinitial_state summed)
within 1e-6 relative RMSE, fp32. Gates are weak (per-token decay about -0.01) so that the maps M of a part do not
decay to 0 and the chain is exercised, not only its E part. Error paths run in the same groups.
Measured in the interpreter (x86): CP vs one process at most 3.8e-7 (dg, chunk 64); that is the fp32 rounding of
both paths: each is 1.6e-7..5.0e-7 from the fp64 oracle, CP no further than the single process.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import re
import socket
import traceback

import pytest
import torch
import torch.multiprocessing as mp

from tests.test_chunk_bwd import LEAVES, _cotangents, _inputs
from tests.utils import assert_close, case_id
from triton_kda import chunk_kda
from triton_kda.configs import _kpad, arch_of, cp_config
from triton_kda.cp import _export_tables
from triton_kda.cp_plan import _Part, partition
from triton_kda.state_cp import ENV_MAP_CHUNKS, _kda_state_cp_compose_kernel

CP_VS_SINGLE = 1e-6
SHARED = ("A_log", "dt_bias", "initial_state")  # one tensor for all ranks: the ranks' gradients add up
TOKENS = ("q", "k", "v", "g", "beta")  # split over the ranks
STATES = dict(initial_state=True, output_final_state=True)
DIMS = dict(B=1, H=1, HV=2, K=16, V=16)


def _case(name, W, layout, seqlens, ctx="ours", compiled=False, env=None, **flags):
    return dict(name=name, W=W, layout=layout, ctx=ctx, compiled=compiled, env=env or {}, params=dict(
        DIMS, T=sum(seqlens), seqlens=seqlens, chunk_size=flags.pop("chunk_size", 32), **flags))


PIECES_OF_ONE_CHUNK = {ENV_MAP_CHUNKS: "1"}  # every exported map in pieces of one chunk, composed


CASES = [
    # 2 ranks: the first sequence crosses, an empty sequence on rank 1; GVA, h0 and final states, chunk 64 (partial
    # chunks at the rank boundary)
    _case("seq-cut-empty", 2, "contiguous", [100, 0, 60], chunk_size=64, **STATES),
    # zigzag: slots 0 | 3 on rank 0, 1 | 2 on rank 1; sequence 0 spans slots 0-2, sequence 1 slots 2-3
    _case("zigzag-cross", 2, "zigzag", [70, 58], state_v_first=True, **STATES),
    # sequences aligned with the rank boundary (no exchange), an empty sequence exactly at the boundary
    _case("aligned", 2, "contiguous", [80, 0, 80], **STATES),
    # under torch.compile (aot_eager): validation traced, the CP path eager (chunk.py hands it to cp.py)
    _case("compiled", 2, "contiguous", [100, 0, 60], compiled=True, **STATES),
    # fla's own context, in-kernel gate, l2norm, beta sigmoid (fla's CP takes no states)
    _case("fla-ctx", 2, "contiguous", [50, 110], ctx="fla", use_gate_in_kernel=True,
          use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
    # 3 ranks: sequence 0 spans all three (rank 1 holds only its middle), short sequences and an empty one after
    _case("span3-middle", 3, "contiguous", [150, 0, 30, 12], **STATES),
    # zigzag over 6 slots: sequence 2 spans slots 1-4, i.e. parts on all three ranks
    _case("zigzag-span", 3, "zigzag", [40, 0, 100, 52], **STATES),
    # one sequence over all ranks (6 slots), disable_recompute, fla's zigzag context
    _case("fla-zigzag-one-seq", 3, "zigzag", [192], ctx="fla", disable_recompute=True),
    # the exported maps in pieces: E of rank 0 (from h0) over 3 chunks, F of rank 1 over 2, V-first states
    _case("pieces-cut", 2, "contiguous", [150, 0, 42], env=PIECES_OF_ONE_CHUNK, state_v_first=True, **STATES),
    # ... [M | E] and [M^T | F] composed on rank 1 (the middle of sequence 0); zigzag's two exports per rank
    _case("pieces-middle", 3, "contiguous", [150, 0, 30, 12], env=PIECES_OF_ONE_CHUNK, **STATES),
    _case("pieces-zigzag", 2, "zigzag", [150, 106], env=PIECES_OF_ONE_CHUNK, state_v_first=True, **STATES),
]


def _ids(cases):
    return [f"W{c['W']}-{c['layout']}-{c['name']}-" + case_id(**c["params"]) for c in cases]


def _global_inputs(case: dict):
    """The global inputs (leaves), the cotangents and the chunk size of a case, on the CPU; weak gates."""
    d, chunk_size, disable_recompute = _inputs(case["params"], torch.float32)
    with torch.no_grad():
        if d["use_gate_in_kernel"]:
            d["A_log"].fill_(-3.0)
        else:
            d["g"].mul_(0.02)
    do, dht = _cotangents(d, seed=0)
    return d, do, dht, chunk_size, disable_recompute


def _slots(W: int, layout: str, rank: int) -> tuple:
    return (rank,) if layout == "contiguous" else (rank, 2 * W - 1 - rank)


def _local(x: torch.Tensor, W: int, layout: str, rank: int) -> torch.Tensor:
    """This rank's tokens of a [1, T, ...] tensor: its part(s) of the stream, concatenated."""
    n = W * (2 if layout == "zigzag" else 1)
    parts = x.chunk(n, dim=1)
    return torch.cat([parts[s] for s in _slots(W, layout, rank)], dim=1)


def _run(d: dict, do, dht, chunk_size: int, disable_recompute: bool, fn=chunk_kda, **extra) -> dict:
    """fn(**d) (chunk_kda) forward and backward; o, final state and the gradients of every leaf."""
    names = [n for n in LEAVES if n in d]
    o, ht = fn(**d, chunk_size=chunk_size, disable_recompute=disable_recompute, **extra)
    outputs, grads = [o], [do]
    if ht is not None:
        outputs.append(ht)
        grads.append(dht)
    res = {"o": o.detach()} if ht is None else {"o": o.detach(), "final_state": ht.detach()}
    res.update({f"d{n}": g for n, g in zip(names, torch.autograd.grad(outputs, [d[n] for n in names], grads),
                                               strict=True)})
    return res


def _cp_run(case: dict, rank: int, group) -> dict:
    """One rank's run of a case: its slice of the inputs under a context (ours or fla's)."""
    W, layout = case["W"], case["layout"]
    d, do, dht, chunk_size, disable_recompute = _global_inputs(case)
    cu, cu_cpu = d.pop("cu_seqlens"), d.pop("cu_seqlens_cpu")
    if case["ctx"] == "fla":
        from fla.ops.cp import build_cp_context as fla_build_cp_context

        ctx = fla_build_cp_context(cu, group=group, cu_seqlens_cpu=cu_cpu, layout=layout)
    else:
        from triton_kda import build_cp_context

        ctx = build_cp_context(cu, group, cu_seqlens_cpu=cu_cpu, layout=layout)
    local = {n: _local(t.detach(), W, layout, rank).requires_grad_() if n in TOKENS else t for n, t in d.items()}
    fn = torch.compile(chunk_kda, backend="aot_eager") if case["compiled"] else chunk_kda
    return _run(local, _local(do, W, layout, rank), dht, chunk_size, disable_recompute, fn=fn,
                cu_seqlens=ctx.cu_seqlens, cp_context=ctx)


def _error(fn) -> tuple:
    try:
        fn()
    except Exception as e:  # the parent checks type and message
        return type(e).__name__, str(e)
    return None, None


def _error_cases(W: int, rank: int, group) -> dict:
    """What each bad call raised on this rank: name -> (exception type name, message)."""
    import torch.distributed as dist

    from triton_kda import build_cp_context

    cu = torch.tensor([0, 40, 96], dtype=torch.int64)
    d = _global_inputs(_case("e", W, "contiguous", [40, 56]))[0]
    d.pop("cu_seqlens"), d.pop("cu_seqlens_cpu")
    out = {
        "indivisible": _error(lambda: build_cp_context(torch.tensor([0, 40, 96 + 1]), group)),
        "zigzag-indivisible": _error(lambda: build_cp_context(torch.tensor([0, 6 * W - 2]), group, layout="zigzag")),
        "differ": _error(lambda: build_cp_context(torch.tensor([0, 40 + (rank == W - 1), 96]), group)),
        "layout": _error(lambda: build_cp_context(cu, group, layout="ring")),
        "group-none": _error(lambda: build_cp_context(cu, None)),
    }
    sub = dist.new_group([0])  # every rank must call new_group; only rank 0 is a member
    out["not-member"] = _error(lambda: build_cp_context(cu, sub))
    ctx = build_cp_context(cu, group)
    local = {n: _local(t.detach(), W, "contiguous", rank) if n in TOKENS else t for n, t in d.items()}
    out["T-mismatch"] = _error(lambda: chunk_kda(**{**local, "q": local["q"][:, 1:]}, cp_context=ctx))
    out["global-cu-seqlens"] = _error(lambda: chunk_kda(**local, cu_seqlens=torch.tensor([0, 10, 20, 96]),
                                                        cp_context=ctx))
    out["other-rank"] = _error(lambda: chunk_kda(**local, cp_context=dataclasses.replace(ctx, rank=(rank + 1) % W)))
    if rank == 0:
        # a context built for the 1-rank group, used with the whole group
        sub_ctx = build_cp_context(cu, sub)
        out["other-group"] = _error(lambda: chunk_kda(**local, cp_context=dataclasses.replace(sub_ctx, group=group)))
    else:
        out["other-group"] = _error(lambda: chunk_kda(**local, cp_context=dataclasses.replace(ctx, group=sub)))
    from fla.ops.cp import build_cp_context as fla_build_cp_context

    fla_ctx = fla_build_cp_context(cu, group=group)
    out["fla-ctx-states"] = _error(lambda: chunk_kda(**local, initial_state=torch.zeros(2, 2, 16, 16),
                                                     cp_context=fla_ctx))
    return out


def _worker(rank: int, W: int, port: int, cases: list, out_dir: str) -> None:
    # TRITON_INTERPRET comes with the environment the test process (conftest) passes on
    torch.set_num_threads(1)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W,
                            timeout=datetime.timedelta(seconds=120))
    try:
        for case in cases:
            saved = {k: os.environ.get(k) for k in case["env"]}
            os.environ.update(case["env"])
            try:
                res = _cp_run(case, rank, dist.group.WORLD)
            except Exception:
                res = {"traceback": traceback.format_exc()}
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            torch.save(res, os.path.join(out_dir, f"{case['name']}-r{rank}.pt"))
        torch.save(_error_cases(W, rank, dist.group.WORLD), os.path.join(out_dir, f"errors-r{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(out_dir: str, name: str, W: int) -> list:
    return [torch.load(os.path.join(out_dir, f"{name}-r{r}.pt")) for r in range(W)]


def _check_case(case: dict, ranks: list, ref: dict) -> None:
    W, layout = case["W"], case["layout"]
    for r, res in enumerate(ranks):
        assert "traceback" not in res, f"rank {r}:\n{res.get('traceback')}"
    n = W * (2 if layout == "zigzag" else 1)
    assert set(ranks[0]) == set(ref), (sorted(ranks[0]), sorted(ref))
    for key, want in ref.items():
        if key[1:] in SHARED or key == "final_state":
            got = sum(res[key] for res in ranks)
        else:
            pieces = [None] * n
            for r, res in enumerate(ranks):
                slots = _slots(W, layout, r)
                for s, piece in zip(slots, res[key].chunk(len(slots), dim=1), strict=True):
                    pieces[s] = piece
            got = torch.cat(pieces, dim=1)
        assert_close(f"{key} (rank slices vs one process)", got, want, CP_VS_SINGLE)


ERRORS = [
    ("indivisible", "ValueError", "must be a positive multiple of world_size"),
    ("zigzag-indivisible", "ValueError", r"multiple of 2 \* world_size"),
    ("differ", "ValueError", "must be the same on every rank of the group"),
    ("layout", "ValueError", "`layout` must be 'contiguous' or 'zigzag'"),
    ("group-none", "TypeError", "`group` must be a torch.distributed ProcessGroup"),
    ("T-mismatch", "ValueError", "`q` must hold this rank's slice of the global batch"),
    ("global-cu-seqlens", "ValueError", "`cu_seqlens` must be None or the context's local boundaries"),
    ("other-rank", "ValueError", "was built for rank .* a context from another group or rank"),
    ("fla-ctx-states", "ValueError", "need a context from triton_kda.build_cp_context"),
]


def _check_errors(ranks: list) -> None:
    for r, errs in enumerate(ranks):
        for name, etype, pattern in ERRORS:
            got = errs[name]
            assert got[0] == etype and re.search(pattern, got[1]), f"rank {r}, {name}: {got}"
        if r == 0:
            assert errs["not-member"] == (None, None), errs["not-member"]  # rank 0 is the 1-rank group's member
            assert errs["other-group"][0] == "ValueError", errs["other-group"]
            assert "built for rank 0 of a 1-rank group" in errs["other-group"][1], errs["other-group"]
        else:
            assert errs["not-member"][0] == "TypeError" and "ProcessGroup" in errs["not-member"][1], errs["not-member"]
            assert errs["other-group"][0] == "TypeError", errs["other-group"]
            assert "`cp_context.group` must be a torch.distributed ProcessGroup" in errs["other-group"][1], errs[
                "other-group"]


def _check_final_state_owners(W: int, out_dir: str, single: dict) -> None:
    """A sequence's final state is on the rank holding its end and nowhere else; an empty sequence's (its initial
    state) on the rank holding its position."""
    if W == 3:
        # [150, 0, 30, 12] over parts of 64 tokens: every sequence ends on rank 2
        ranks = _load(out_dir, "span3-middle", 3)
        assert not ranks[0]["final_state"].any() and not ranks[1]["final_state"].any()
        assert torch.equal(ranks[2]["final_state"] != 0, single["span3-middle"]["final_state"] != 0)
    else:
        # [80, 0, 80]: sequence 0 ends on rank 0; the empty sequence at token 80 and sequence 2 belong to rank 1
        ranks = _load(out_dir, "aligned", 2)
        assert ranks[0]["final_state"][0].all() and not ranks[0]["final_state"][1:].any()
        assert not ranks[1]["final_state"][0].any() and ranks[1]["final_state"][1:].all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="gloo on CPU through the interpreter; on GPUs the NCCL run is "
                                                       "benchmarks/cp_dist.py")
@pytest.mark.parametrize("W", [2, 3], ids=lambda W: f"W{W}")
def test_cp_group(W, tmp_path):
    """All cases of one world size (CASES) in one spawned gloo group, plus its error paths; while the ranks run, the
    single-process results are computed here. Every failing case is reported."""
    cases = [c for c in CASES if c["W"] == W]
    procs = mp.start_processes(_worker, args=(W, _free_port(), cases, str(tmp_path)), nprocs=W, join=False,
                               start_method="spawn")
    single = {}
    for c in cases:
        d, do, dht, chunk_size, disable_recompute = _global_inputs(c)
        single[c["name"]] = _run(d, do, dht, chunk_size, disable_recompute)
    while not procs.join():
        pass
    failures = []
    for c, cid in zip(cases, _ids(cases), strict=True):
        try:
            _check_case(c, _load(str(tmp_path), c["name"], W), single[c["name"]])
        except AssertionError as e:
            failures.append(f"{cid}: {e}")
    for name, check in (("errors", lambda: _check_errors(_load(str(tmp_path), "errors", W))),
                        ("final-state owners", lambda: _check_final_state_owners(W, str(tmp_path), single))):
        try:
            check()
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)


# host-only: the partition against fla's (fla 0.6.0 computes the same fields from world_size and rank)
PARTITIONS = [([0, 100, 100, 160], 2, "contiguous"), ([0, 150, 150, 180, 192], 3, "contiguous"),
              ([0, 70, 128], 2, "zigzag"), ([0, 40, 40, 140, 192], 3, "zigzag"), ([0, 8], 4, "zigzag"),
              ([0, 0, 12, 12], 4, "contiguous")]


@pytest.mark.parametrize("bounds,W,layout", PARTITIONS, ids=[f"{b}-W{w}-{lay}" for b, w, lay in PARTITIONS])
def test_partition_matches_fla(bounds, W, layout):
    from fla.ops.cp.context import get_cp_cu_seqlens

    cu = torch.tensor(bounds)
    keys = (("pre_num_ranks", "post_num_ranks", "is_first_rank", "is_last_rank", "pre_num_conv_tokens")
            if layout == "contiguous" else
            ("part_len", "front_num_seqs", "pre_num_ranks_by_part", "post_num_ranks_by_part", "is_first_by_part",
             "is_last_by_part", "pre_num_conv_tokens_by_part"))
    owners = []
    for r in range(W):
        fla = get_cp_cu_seqlens(cu, cu_seqlens_cpu=cu, world_size=W, rank=r, layout=layout)
        ours = partition(bounds, W, r, layout)
        assert ours["cu_seqlens"] == fla.cu_seqlens_cpu.tolist()
        assert {k: ours[k] for k in keys} == {k: getattr(fla, k) for k in keys}
        owners += list(ours["empty_ids"])
        assert len(ours["seq_ids"]) == len(ours["cu_seqlens"]) - 1
    empties = [n for n in range(len(bounds) - 1) if bounds[n] == bounds[n + 1]]
    assert sorted(owners) == empties  # every empty sequence has exactly one rank


def test_export_tables_cut_the_exported_sequences():
    # one part: sequence 0 continues from earlier parts, sequence 2 into later ones (chunks of 32: 3, 1, 5)
    parts = (_Part(1, 0, 2, 1, 1),)
    fwd = _export_tables(parts, (96, 0, 150), 32, 2, "post", torch.device("cpu"))
    assert fwd.cu_seqlens.tolist() == [0, 96, 96, 160, 224, 246]
    assert fwd.chunk_offsets.tolist() == [0, 3, 3, 5, 7, 8]
    assert fwd.piece_seq.tolist() == [0, 1, 2, 2, 2]
    assert fwd.ends.tolist() == [-1, 1, 2, -1]  # sequence 0 was continued, 1 and 2 start here
    assert fwd.map_pieces.tolist() == [2, 3, 4] and fwd.runs.tolist() == [0, 3] and fwd.run_m.tolist() == [0]
    assert (fwd.NM, fwd.R, fwd.split) == (3, 1, True)
    bwd = _export_tables(parts, (96, 0, 150), 32, 2, "pre", torch.device("cpu"))
    assert bwd.piece_seq.tolist() == [0, 0, 1, 2] and bwd.cu_seqlens.tolist() == [0, 64, 96, 96, 246]
    assert bwd.ends.tolist() == [-1, 2, 3, -1]  # sequence 2 continues: its end needs the later parts
    assert bwd.map_pieces.tolist() == [0, 1] and bwd.run_m.tolist() == [0] and bwd.split  # 0 ends here
    # a part that holds the middle of one sequence; pieces as long as the sequence keep it whole
    mid = _export_tables((_Part(1, 0, 0, 1, 1),), (64,), 32, 2, "post", torch.device("cpu"))
    assert mid.map_pieces.tolist() == [0] and mid.run_m.tolist() == [1] and not mid.split


def test_compose_kernel_chains_piece_maps():
    """[M | E] of three pieces composed forward and [M^T | F] backward, against the fp64 products."""
    K, V, HV = 16, 8, 2
    gen = torch.Generator().manual_seed(0)
    maps = torch.randn(4, HV, K, K + V, generator=gen) / K ** 0.5
    runs, run_m = torch.tensor([0, 3, 4]), torch.tensor([1, 0], dtype=torch.int32)
    cfg = cp_config(arch_of(maps.device), K, V, 4)
    for reverse in (False, True):
        out = torch.full((2, HV, K, K + V), float("nan"))
        _kda_state_cp_compose_kernel[(-(-(K + V) // cfg.chain_BV), 2, HV)](
            maps, out, runs, run_m, HV, K, V, _kpad(K, 0), cfg.chain_BV, cfg.chain_BKC, reverse,
            num_warps=cfg.chain_warps)
        m = maps.double()
        order = [2, 1, 0] if reverse else [0, 1, 2]
        want = m[order[0]].clone()
        for j in order[1:]:
            want = m[j][..., :K] @ want + torch.cat([torch.zeros(HV, K, K, dtype=m.dtype), m[j][..., K:]], -1)
        assert_close(f"composed map (reverse={reverse})", out[0], want, 1e-6)
        assert torch.equal(out[1, ..., K:], maps[3, ..., K:]) and out[1, ..., :K].isnan().all()  # M not needed

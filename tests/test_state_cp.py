"""Intra-card CP (triton_kda/state_cp.py): the planner, and chunk_kda with pieces against the serial path and the
fp64 oracle; the states a training forward keeps every few chunks, from which its backward recomputes in parallel.

The split is forced through the environment (TRITON_KDA_INTRACARD_CP=1 with a piece length of 1-4 chunks), so
small interpreter shapes give many pieces. Gates are weak (a piece's map M must not decay to 0, or CP would only
test the E part); o, the final state and every gradient must match the serial path within 1e-6 (relative RMSE,
fp32; 5e-6 for the gate parameters' sums over every token) and the oracle within the fp32 tolerance of the other
tests.
"""
import pytest
import torch

from reference.kda import kda_recurrent
from tests.test_chunk_bwd import LEAVES, _cotangents, _inputs, _oracle_grads
from tests.utils import DEVICE, assert_close, case_id
from triton_kda import chunk_kda, configs, state_cp
from triton_kda.state_cp import (
    ENV_CKPT_CHUNKS,
    ENV_MAP_CHUNKS,
    ENV_MODE,
    ENV_PIECE_CHUNKS,
    _piece_chunks,
    _piece_plan,
    _slot_table,
    checkpoint_chunks,
    map_piece_chunks,
    piece_chunks,
    plan_pieces,
)

CP_VS_SERIAL = 1e-6
# dA_log and ddt_bias sum every token's gate term, with cancellation: on an H100 (2026-11-26, 2100527) CP and serial
# differ by 1.4e-6 in dA_log of the varlen case (its two elements), every other tensor within 1e-6
CP_VS_SERIAL_PARAMS = 5e-6
VS_ORACLE = 1e-5


def _weaken_gates(d: dict) -> None:
    """Per-token decays of about -0.01..-0.05, so a piece of a few chunks keeps a non-trivial map M."""
    if d["use_gate_in_kernel"]:
        d["A_log"].data.fill_(-3.0)
    else:
        d["g"].data.mul_(0.02)


def _run(d: dict, chunk_size: int, do, dht, *, backward: bool) -> dict:
    names = [n for n in LEAVES if n in d]
    o, ht = chunk_kda(**d, chunk_size=chunk_size)
    out = {"o": o.detach(), "final_state": ht.detach()}
    if backward:
        grads = torch.autograd.grad([o, ht], [d[n] for n in names], [do, dht])
        out.update({f"d{n}": g for n, g in zip(names, grads, strict=True)})
    return out


def _serial_and_cp(monkeypatch, d, chunk_size, piece_chunks, *, backward: bool) -> tuple[dict, dict]:
    do, dht = _cotangents(d, seed=0)
    monkeypatch.setenv(ENV_MODE, "0")
    serial = _run(d, chunk_size, do, dht, backward=backward)
    monkeypatch.setenv(ENV_MODE, "1")
    monkeypatch.setenv(ENV_PIECE_CHUNKS, str(piece_chunks))
    cp = _run(d, chunk_size, do, dht, backward=backward)
    return serial, cp


def _case(piece_chunks, **params):
    return dict(piece_chunks=piece_chunks, **params)


STATE = dict(initial_state=True, output_final_state=True)
GRAD_CASES = [
    # varlen, long beside short: 300 tokens -> 10 pieces, 33 (one chunk plus one token) -> 2, 5 and 64 -> 1-2,
    # an empty sequence; GVA, V-first states, in-kernel gate and beta sigmoid
    _case(1, B=1, T=402, H=1, HV=2, K=16, V=16, seqlens=[300, 33, 5, 0, 64], chunk_size=32, use_gate_in_kernel=True,
          use_beta_sigmoid_in_kernel=True, state_v_first=True, **STATE),
    # fixed length, safe gate path, l2norm, chunk 64 with a partial last chunk
    _case(1, B=2, T=161, H=1, HV=1, K=16, V=32, chunk_size=64, use_gate_in_kernel=True, lower_bound=-0.1,
          use_qk_l2norm_in_kernel=True, **STATE),
]
FWD_CASES = [
    _case(4, B=1, T=1023, H=1, HV=1, K=16, V=16, chunk_size=32, **STATE),
    _case(4, B=1, T=1025, H=1, HV=1, K=16, V=16, chunk_size=32, **STATE),
]


def _ids(cases):
    return [case_id(**{k: v for k, v in c.items() if k != "piece_chunks"}) + f"-pieces{c['piece_chunks']}chunks"
            for c in cases]


def _check(monkeypatch, params, *, backward: bool):
    params = dict(params)
    piece_chunks = params.pop("piece_chunks")
    d, chunk_size, _ = _inputs(params, torch.float32)
    _weaken_gates(d)
    serial, cp = _serial_and_cp(monkeypatch, d, chunk_size, piece_chunks, backward=backward)
    for name, ref in serial.items():
        tol = CP_VS_SERIAL_PARAMS if name in ("dA_log", "ddt_bias") else CP_VS_SERIAL
        assert_close(f"{name} (CP vs serial)", cp[name], ref, tol)
    if backward:
        do, dht = _cotangents(d, seed=0)
        oracle = {f"d{n}": g for n, g in _oracle_grads(d, do, dht).items()}
    else:
        oracle = {}
    ref = {n: (d[n].detach() if isinstance(d[n], torch.Tensor) and d[n].is_floating_point() else d[n]) for n in d}
    oracle["o"], oracle["final_state"] = kda_recurrent(**ref)
    for name, r in oracle.items():
        assert_close(f"{name} (CP vs fp64 oracle)", cp[name], r, VS_ORACLE)


@pytest.mark.parametrize("params", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_cp_grads_match_serial_and_oracle(monkeypatch, params):
    _check(monkeypatch, params, backward=True)


@pytest.mark.parametrize("params", FWD_CASES, ids=_ids(FWD_CASES))
def test_cp_forward_irregular_lengths(monkeypatch, params):
    _check(monkeypatch, params, backward=False)


def test_cp_two_pieces_bit_identical(monkeypatch):
    """The first piece's map starts from h0 and needs no M, and the second piece starts from that map's E: with two
    pieces the CP path does the serial path's arithmetic, bit for bit."""
    d, chunk_size, _ = _inputs(dict(B=1, T=100, H=1, HV=1, K=16, V=16, chunk_size=32, **STATE), torch.float32)
    serial, cp = _serial_and_cp(monkeypatch, d, chunk_size, 2, backward=False)
    for name in serial:
        assert torch.equal(serial[name], cp[name]), name


# planner: pure host code, H100-sized (132 SMs, 2 programs per SM), K = V = 128, bf16 launch blocks (BV = BC = 64)
SLOTS = 264


def _length(lens, BT, HV, mode="auto", forced=0):
    return _piece_chunks(tuple((n + BT - 1) // BT for n in lens), HV, 2, 2, 2, 2, SLOTS, mode, forced)


def test_planner_splits_long_few_head_sequences():
    L = _length([65536], 64, 8)
    assert 16 <= L <= 128, L
    assert 8 <= 1024 // L <= 64
    assert _length([32768], 64, 16) > 0


def test_planner_leaves_full_gpu_shapes_serial():
    assert _length([2048] * 8, 64, 32) == 0
    assert _length([1024], 64, 8) == 0  # 16 chunks: too short to pay for the maps
    # 64 serial programs (H32) on 132 SMs: CP measured slower on an H200 at T8192 and T32768
    assert _length([8192], 64, 32) == 0 and _length([32768], 64, 32) == 0
    assert _length([32768], 64, 32, mode="1") > 0  # forcing still splits


def _on_132_sms(monkeypatch):
    monkeypatch.setattr(state_cp, "arch_of", lambda device: 90)
    monkeypatch.setattr(state_cp, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    return torch.device("cuda")


def test_exported_maps_cut_to_fill_the_gpu(monkeypatch):
    """CP across ranks (cp.py): a rank's exported map over a long local sequence runs in pieces whose map programs
    fill the SMs; the environment fixes the length."""
    dev = _on_132_sms(monkeypatch)
    monkeypatch.delenv(ENV_MAP_CHUNKS, raising=False)
    # B1 H32 K = V = 128 bf16, T = 256K over 2 ranks: 2048 chunks, 128 map programs per piece -> 4 pieces
    assert map_piece_chunks((2048,), 32, 128, 128, 2, dev) == 512
    assert map_piece_chunks((2048,), 4, 128, 128, 2, dev) == 128  # fewer heads, finer pieces
    assert map_piece_chunks((1,), 32, 128, 128, 2, dev) == 1
    monkeypatch.setenv(ENV_MAP_CHUNKS, "7")
    assert map_piece_chunks((2048,), 32, 128, 128, 2, dev) == 7
    for bad in ("0", "x"):
        monkeypatch.setenv(ENV_MAP_CHUNKS, bad)
        with pytest.raises(ValueError, match=ENV_MAP_CHUNKS):
            map_piece_chunks((2048,), 32, 128, 128, 2, dev)


def test_planner_against_the_narrow_serial_blocks(monkeypatch):
    """On 132 SMs (an H100 or H200) the serial kernel at B1 H16 takes 32-wide V blocks (64 programs, measured faster
    than the split at T8192, docs/benchmarks/runs/2026-11-26_state_blocks), so the planner leaves it whole; at B1 H8
    it still splits, into the pieces the 64-wide blocks' model picks."""
    gpu = _on_132_sms(monkeypatch)
    assert piece_chunks((8192,), 64, 16, 128, 128, 2, gpu) == 0
    assert piece_chunks((32768,), 64, 8, 128, 128, 2, gpu) == _piece_chunks((512,), 8, 4, 2, 2, 2, 264, "auto", 0) > 0


def test_planner_varlen_splits_only_the_long_sequence():
    lens = (131072,) + (1024,) * 16
    L = _length(lens, 64, 8)
    assert L >= 16, L  # the 16-chunk sequences stay whole
    plan = _piece_plan(lens, 64, L, torch.device("cpu"))
    long_pieces = int(plan.seq_pieces[1])
    assert long_pieces == 2048 // L
    assert plan.N == long_pieces + 16 and plan.NM == long_pieces - 1
    assert torch.equal(plan.seq_pieces[1:] - plan.seq_pieces[:-1], torch.tensor([long_pieces] + [1] * 16))


@pytest.mark.parametrize("lens", [(1023,), (1025,), (33, 0, 100, 5), (0,)], ids=lambda x: ",".join(map(str, x)))
def test_piece_tables(lens):
    """Pieces of L chunks (the remainder last), every sequence at least one piece, maps listed in order."""
    BT, L = 32, 3
    plan = _piece_plan(lens, BT, L, torch.device("cpu"))
    cu, offs, seq, seq_pieces = [0], [0], [], [0]
    for n, length in enumerate(lens):
        nc = -(-length // BT)
        pieces = max(1, -(-nc // L))
        for j in range(pieces):
            cu.append(cu[-1 - j] + min(length, (j + 1) * L * BT))
            offs.append(offs[-1 - j] + min(nc, (j + 1) * L))
            seq.append(n)
        seq_pieces.append(seq_pieces[-1] + pieces)
    assert plan.cu_seqlens.tolist() == cu and plan.chunk_offsets.tolist() == offs
    assert plan.piece_seq.tolist() == seq and plan.seq_pieces.tolist() == seq_pieces
    assert plan.first.tolist() == seq_pieces[:-1] and plan.last.tolist() == [p - 1 for p in seq_pieces[1:]]
    assert plan.fwd_maps.tolist() == [p for p in range(plan.N) if p not in plan.last.tolist()]
    assert plan.bwd_maps.tolist() == [p for p in range(plan.N) if p not in seq_pieces[:-1]]
    assert plan.N == len(seq) and plan.NM == len(seq) - len(lens)


def test_plans_cached_by_content(monkeypatch):
    monkeypatch.setenv(ENV_MODE, "1")
    monkeypatch.setenv(ENV_PIECE_CHUNKS, "2")
    a = plan_pieces(tuple([300, 33]), 32, 2, 16, 16, 4, torch.device(DEVICE))
    b = plan_pieces(tuple(torch.tensor([300, 33]).tolist()), 32, 2, 16, 16, 4, torch.device(DEVICE))
    assert a is not None and a is b


@pytest.mark.parametrize("name,value", [(ENV_MODE, "yes"), (ENV_PIECE_CHUNKS, "-2"), (ENV_PIECE_CHUNKS, "x")])
def test_env_values_checked(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        plan_pieces((4096,), 64, 1, 16, 16, 4, torch.device(DEVICE))


def test_env_switch_off_and_on(monkeypatch):
    monkeypatch.setenv(ENV_MODE, "0")
    assert plan_pieces((1 << 20,), 64, 1, 128, 128, 2, torch.device(DEVICE)) is None
    monkeypatch.setenv(ENV_MODE, "1")
    plan = plan_pieces((1 << 20,), 64, 1, 128, 128, 2, torch.device(DEVICE))
    assert plan is not None and plan.N > 1
    assert plan_pieces((64,), 64, 1, 128, 128, 2, torch.device(DEVICE)) is None  # one chunk: nothing to split


def test_min_chunks_lengthens_the_planners_pieces_not_a_forced_length(monkeypatch):
    monkeypatch.setenv(ENV_MODE, "1")
    device = torch.device(DEVICE)
    planned = plan_pieces((8192,), 64, 1, 128, 128, 2, device)
    longer = plan_pieces((8192,), 64, 1, 128, 128, 2, device, min_chunks=(8192 // 64) // planned.N * 2)
    assert longer.N == planned.N // 2
    monkeypatch.setenv(ENV_PIECE_CHUNKS, "2")
    assert plan_pieces((8192,), 64, 1, 128, 128, 2, device, min_chunks=100).N == 64


def test_checkpoint_spacing_on_132_sms(monkeypatch):
    """Kept states where the serial recompute leaves an H100's slots idle: B1 T8192 H16 (fp32: 128 programs of
    16-wide V blocks; bf16: 64 of 32-wide), none where the serial programs fill the GPU; the CP pieces' length where
    the forward splits."""
    gpu = _on_132_sms(monkeypatch)
    assert checkpoint_chunks((8192,), 64, 16, 128, 128, 4, gpu) == 16
    assert checkpoint_chunks((8192,), 64, 16, 128, 128, 2, gpu) == 8
    assert checkpoint_chunks((8192,) * 2, 64, 32, 128, 128, 4, gpu) == 0
    assert checkpoint_chunks((2048,) * 8, 64, 32, 128, 128, 2, gpu) == 0
    assert checkpoint_chunks((64,), 64, 1, 128, 128, 4, gpu) == 0  # one chunk: nothing to recompute in parallel
    L = piece_chunks((32768,), 64, 8, 128, 128, 2, gpu)
    assert L > 0 and checkpoint_chunks((32768,), 64, 8, 128, 128, 2, gpu) == L
    # varlen: one long sequence among short ones keeps its serial recompute's slots idle, whatever the batch size
    assert checkpoint_chunks((8192,) + (128,) * 64, 64, 16, 128, 128, 4, gpu) > 0


def test_checkpoint_env(monkeypatch):
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "3")
    assert checkpoint_chunks((200, 10), 16, 1, 16, 16, 4, torch.device(DEVICE)) == 3
    assert checkpoint_chunks((40,), 16, 1, 16, 16, 4, torch.device(DEVICE)) == 0  # 3 chunks: one piece
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "0")
    assert checkpoint_chunks((1 << 20,), 64, 1, 128, 128, 4, torch.device(DEVICE)) == 0
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "x")
    with pytest.raises(ValueError, match=ENV_CKPT_CHUNKS):
        checkpoint_chunks((200,), 16, 1, 16, 16, 4, torch.device(DEVICE))


def test_checkpoint_slots():
    """Each non-empty piece's first chunk names its piece; every other chunk -1; empty pieces write past NT."""
    lens, BT, L = (100, 0, 33), 16, 2   # 7 chunks -> pieces at chunks 0, 2, 4, 6; an empty piece; 3 chunks -> 7, 9
    pieces = _piece_plan(lens, BT, L, torch.device(DEVICE))
    slots = _slot_table(pieces, 10)
    assert slots[:10].tolist() == [0, -1, 1, -1, 2, -1, 3, 5, -1, 6]
    assert slots[10:].tolist() == [-1] * 4 + [4] + [-1] * 2


KEPT_CASES = [
    (dict(B=1, T=190, H=1, HV=2, K=16, V=24, seqlens=[13, 0, 100, 7, 70], chunk_size=32, use_gate_in_kernel=True,
          state_v_first=True, **STATE), torch.float32),
    (dict(B=2, T=150, H=2, HV=2, K=16, V=16, chunk_size=32, use_qk_l2norm_in_kernel=True, **STATE), torch.float32),
    (dict(B=2, T=150, H=1, HV=2, K=16, V=16, chunk_size=32, **STATE), torch.float16),
]


@pytest.mark.parametrize("params,dtype", KEPT_CASES, ids=[case_id(**p, dtype=dt) for p, dt in KEPT_CASES])
def test_kept_states_recompute_bit_identical(monkeypatch, params, dtype):
    """A training forward that keeps its state every 2 chunks: the backward recomputes h and v_new from those states
    (in parallel), and o, the final state and every gradient equal those of the serial recompute bit for bit. Every
    buffer starts as NaN, so a kept state that is read but was never written fails."""
    import triton_kda.ops

    params = dict(params)
    chunk_size = params.pop("chunk_size")
    d, _, _ = _inputs(dict(params, chunk_size=chunk_size), dtype)
    do, dht = _cotangents(d, seed=0)
    starts = []
    state_fwd = triton_kda.ops.state_fwd

    def spy(*args, **kwargs):
        starts.append(kwargs.get("start"))
        return state_fwd(*args, **kwargs)

    monkeypatch.setattr(triton_kda.ops, "state_fwd", spy)
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "0")
    serial = _run(d, chunk_size, do, dht, backward=True)
    assert starts == [None, None]
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: (lambda t: t.fill_(float("nan")) if t.is_floating_point()
                                                          else t)(empty(*a, **kw)))
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "2")
    kept = _run(d, chunk_size, do, dht, backward=True)
    monkeypatch.undo()
    chunks = [-(-n // chunk_size) for n in params.get("seqlens") or [params["T"]] * params["B"]]
    assert starts[2] is None and starts[3].shape[0] == sum(max(1, -(-nc // 2)) for nc in chunks)
    for name, value in serial.items():
        assert torch.equal(value, kept[name]), f"{name} differs when the backward starts from kept states"


def test_kept_states_need_the_forwards_spacing(monkeypatch):
    """The backward checks the kept states against its own plan: a spacing changed in between is an error, not a
    wrong gradient."""
    d, chunk_size, _ = _inputs(dict(B=1, T=200, H=1, HV=1, K=16, V=16, chunk_size=32), torch.float32)
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "2")
    o, _ = chunk_kda(**d, chunk_size=chunk_size)
    monkeypatch.setenv(ENV_CKPT_CHUNKS, "3")
    with pytest.raises(RuntimeError, match=ENV_CKPT_CHUNKS):
        o.sum().backward()


@pytest.mark.parametrize("dtype,K,BC", [(torch.float16, 32, 16), (torch.float16, 32, 32), (torch.float32, 32, 16)],
                         ids=["fp16-BC<K", "fp16-BC=K", "fp32-BC<K"])
def test_prefetching_map_bodies_equal_the_plain_ones(dtype, K, BC):
    """The map kernels' prefetching bodies (PREFETCH: every load unconditional, masked off in M blocks; the launch
    table takes them with pipelined chunk loops on sm_90) give the plain bodies' maps bit for bit: varlen pieces with
    a partial last chunk, initial state and final-state gradient, M and E blocks, [K, BC] column blocks narrower than
    K and as wide."""
    BT, HV, V, L = 16, 2, 32, 2
    lens = (100, 37)
    gen = torch.Generator(device=DEVICE).manual_seed(0)

    def rand(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=gen, device=DEVICE) * scale).to(dt)

    TT, NT = sum(lens), sum((n + BT - 1) // BT for n in lens)
    qg, kg, w = (rand(TT, HV, K, scale=0.2) for _ in range(3))
    u, do = rand(TT, HV, V), rand(TT, HV, V)
    Aqk = rand(TT, HV, BT, scale=0.2, dt=torch.float32)
    gl = -torch.rand(NT, HV, K, generator=gen, device=DEVICE) * 0.3
    h0, dht = rand(len(lens), HV, K, V, dt=torch.float32), rand(len(lens), HV, K, V, dt=torch.float32)
    pieces = _piece_plan(lens, BT, L, torch.device(DEVICE))
    prec = "tf32rn" if dtype == torch.float16 else "tf32x3"
    const = dict(HV=HV, K=K, V=V, BT=BT, BK=K, BC=BC, NKB=K // BC, V_FIRST=False, IS_BF16=False, PREC=prec,
                 PAIRS=False)
    tables = (pieces.cu_seqlens, pieces.chunk_offsets, pieces.piece_seq, pieces.seq_pieces)
    grid = (K // BC + V // BC, pieces.NM, HV)
    for kernel, inputs, maps_of, state in (
        (state_cp._kda_state_cp_fwd_map_kernel, (kg, w, u, gl, gl, h0), pieces.fwd_maps, "HAS_H0"),
        (state_cp._kda_state_cp_bwd_map_kernel, (qg, kg, w, Aqk, gl, gl, do, dht), pieces.bwd_maps, "HAS_DHT"),
    ):
        out = {}
        for prefetch in (False, True):
            maps = torch.full((pieces.NM, HV, K, K + V), float("nan"), device=DEVICE)
            kernel[grid](*inputs, maps, *tables, maps_of, **const, **{state: True}, PREFETCH=prefetch)
            out[prefetch] = maps
        assert torch.equal(out[True].nan_to_num(7.0), out[False].nan_to_num(7.0)), kernel.__name__
        assert out[True][:, :, :, K:].isfinite().all()

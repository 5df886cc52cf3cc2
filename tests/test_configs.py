"""The launch table (`triton_kda/configs.py`): tile widths every GPU entry picks, and TRITON_KDA_AUTOTUNE's choice."""
import pytest
import torch

from triton_kda import configs
from triton_kda.check.portability import SMEM_LIMITS
from triton_kda.configs import (
    _kpad,
    gate_bwd_config,
    gate_cumsum_config,
    intra_bwd_candidates,
    intra_bwd_config,
    intra_candidates,
    intra_config,
    state_candidates,
    state_config,
    tuned,
    wy_bwd_config,
)

HEAD_DIMS = ((8, 8), (16, 16), (20, 100), (60, 24), (128, 128), (256, 256))


@pytest.mark.parametrize("arch", sorted(SMEM_LIMITS))
def test_gpu_tiles_are_at_least_32_wide(arch):
    """16-wide K or V tiles in bf16/fp16 products gave illegal addresses and wrong outputs on sm_90 (triton 3.6):
    every table entry and autotuning candidate a GPU can pick for 16-bit inputs is 32 wide or more."""
    for K, V in HEAD_DIMS:
        tiles = {"pad K": _kpad(K, arch), "pad V": _kpad(V, arch)}
        entries = [("intra", c) for c in [intra_config(arch, K, V), *intra_candidates(arch, K, V)]]
        entries += [("wy_bwd", wy_bwd_config(arch, K, V))]
        entries += [("intra_bwd", c) for c in [intra_bwd_config(arch, K, V), *intra_bwd_candidates(arch, K, V)]]
        for i, (name, c) in enumerate(entries):
            tiles.update({f"{name}[{i}] BK": c.BK, f"{name}[{i}] BV": c.BV})
        for i, c in enumerate([state_config(arch, K, V, 2), state_config(arch, K, V, 2, True),
                               *state_candidates(arch, K, V, 2)]):
            tiles[f"state[{i}] BV"] = c.BV
        narrow = {n: t for n, t in tiles.items() if t < 32}
        assert not narrow, f"sm_{arch} K={K} V={V}: tiles narrower than 32: {narrow}"


@pytest.mark.parametrize("arch", sorted(SMEM_LIMITS))
def test_autotune_candidates_stay_inside_what_was_validated(arch):
    """The intra forward is offered one pipeline stage only (2 gave wrong outputs), the state kernels no more
    stages and no wider V blocks than the table (the table's are bounded by shared memory)."""
    for K, V in HEAD_DIMS:
        assert all(c.num_stages == 1 for c in intra_candidates(arch, K, V))
        for es in (2, 4):
            base = state_config(arch, K, V, es)
            for c in state_candidates(arch, K, V, es):
                assert c.num_stages <= base.num_stages and c.BV <= base.BV


def test_state_blocks_halved_where_programs_leave_sms_idle(monkeypatch):
    """A state launch takes 32-wide V blocks where 64-wide ones would fill at most half the SMs (132, as an H100)."""
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    cpu = torch.device("cpu")
    assert configs.state_narrow(16, 128, cpu)        # B1 H16: 32 programs
    assert configs.state_narrow(33, 128, cpu)        # B1 H32: 66 programs
    assert not configs.state_narrow(34, 128, cpu)    # 68 programs
    assert not configs.state_narrow(64, 128, cpu)    # B2 H32: 128 programs
    assert (state_config(90, 128, 128, 2).BV, state_config(90, 128, 128, 2, True).BV) == (64, 32)
    assert state_config(90, 256, 256, 2, True) == state_config(90, 256, 256, 2)  # already 32 wide
    # fp32: 32 -> 16 wide, with two pipeline stages where shared memory holds them (sm_90, sm_100)
    assert state_config(90, 128, 128, 4) == configs.StateConfig(BV=32, num_warps=4, num_stages=1)
    assert state_config(90, 128, 128, 4, True) == configs.StateConfig(BV=16, num_warps=4, num_stages=2)
    assert state_config(89, 128, 128, 4, True) == configs.StateConfig(BV=16, num_warps=4, num_stages=1)
    assert state_config(90, 256, 256, 4, True) == state_config(90, 256, 256, 4)  # already 16 wide


def _enable(monkeypatch, value="1"):
    monkeypatch.setenv("TRITON_KDA_AUTOTUNE", value)
    monkeypatch.setattr(configs, "is_interpreter", lambda: False)
    monkeypatch.setattr(configs, "_TUNED", {})


def test_tuned_is_the_table_entry_by_default(monkeypatch):
    monkeypatch.delenv("TRITON_KDA_AUTOTUNE", raising=False)
    ran = []
    assert tuned(("k",), "table", ["a", "b"], ran.append) == "table"
    assert ran == []


def test_tuned_off_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_KDA_AUTOTUNE", "1")
    monkeypatch.setattr(configs, "is_interpreter", lambda: True)
    ran = []
    assert tuned(("k",), "table", ["a"], ran.append) == "table"
    assert ran == []


def test_tuned_picks_the_fastest_once_per_key(monkeypatch):
    _enable(monkeypatch)
    times = {"table": 2.0, "a": 1.0, "b": 3.0}
    ran = []

    def bench(fn):
        fn()
        return times[ran[-1]]

    assert tuned(("k", 1), "table", ["a", "b", "a"], ran.append, bench) == "a"
    assert ran == ["table", "a", "b"]
    assert tuned(("k", 1), "table", ["a", "b"], ran.append, bench) == "a"
    assert ran == ["table", "a", "b"], "a remembered key is not timed again"
    times["table"] = 0.5
    assert tuned(("k", 2), "table", ["a", "b"], ran.append, bench) == "table"


def test_tuned_skips_a_candidate_that_raises(monkeypatch, caplog):
    _enable(monkeypatch)
    times = {"table": 2.0, "a": 1.0}

    def run(cfg):
        if cfg == "a":
            raise RuntimeError("out of resources: shared memory")

    def bench(fn):
        fn()
        return times["table"]

    assert tuned(("k",), "table", ["a"], run, bench) == "table"
    assert "skipped a: RuntimeError: out of resources" in caplog.text


def test_bad_autotune_value(monkeypatch):
    _enable(monkeypatch, "yes")
    with pytest.raises(ValueError, match="TRITON_KDA_AUTOTUNE must be 0 or 1, got 'yes'"):
        tuned(("k",), "table", [], lambda cfg: None)


def test_spanning_chunk_local_backward_takes_32_wide_v_blocks():
    """The spanning-form kernel (fp32 and fp16 inputs) at K <= 128 takes 32-wide V blocks in the chunk-local backward
    (measured faster on an H100), the rest the 64-wide table entry."""
    assert intra_bwd_config(90, 128, 128, True).BV == 32 and intra_bwd_config(90, 64, 64, True).BV == 32
    assert intra_bwd_config(90, 128, 128).BV == intra_bwd_config(90, 256, 256, True).BV == 64
    # fp32's split state-side products at K = 256: three stages need 108544 B, over the 99 KB parts' 101376 B
    stages = [intra_bwd_config(a, 256, 256, True, True).num_stages for a in (80, 86, 89, 90, 100, 120)]
    assert stages == [3, 2, 2, 3, 3, 2]
    assert intra_bwd_config(89, 256, 256, True).num_stages == intra_bwd_config(89, 128, 128, True, True).num_stages == 3


@pytest.mark.parametrize("arch", sorted(SMEM_LIMITS))
def test_gate_cumsum_of_a_pair_takes_32_wide_k_slices(arch):
    """The gate cumsum that writes an fp32 pair from an fp64 scan (fp32 inputs) takes K slices of at most 32 (measured
    faster on an H200); without the pair it takes the gate backward's slices."""
    for K in (16, 64, 128, 256):
        base = gate_bwd_config(arch, K)
        assert gate_cumsum_config(arch, K, False) == base
        assert gate_cumsum_config(arch, K, True) == base._replace(BK=min(base.BK, 32))

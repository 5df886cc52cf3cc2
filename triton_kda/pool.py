"""State pools for `chunk_kda` (prefill into the slots that decode reads, see recurrent.py).

A pool is an fp32 tensor ``[num_slots, HV, K, V]`` (``[num_slots, HV, V, K]`` with state_v_first; any slot stride,
last three dims contiguous); ``ssm_state_indices`` ``[N]`` names the slot of each sequence, a negative entry marks
padding (that sequence starts from a zero state and its final state is written nowhere). `chunk_kda` gathers the
named slots into its initial states and scatters the final states back, one copy kernel each way
(``h0[n] = pool[idx[n]]``, ``pool[idx[n]] = ht[n]``): 2 * N states of traffic, small next to a prefill, and no
host-device sync.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_kda._validate import KDAProblem
from triton_kda._validate_recurrent import validate_state_pool
from triton_kda.configs import arch_of, cdiv, pool_copy_config


@triton.jit
def _kda_pool_gather_fwd_kernel(pool, indices, h0, stride_pool, num_slots, KV: tl.constexpr, BLOCK: tl.constexpr):
    """h0[n] = pool[indices[n]] (zeros where the index is negative or past the pool); pool, h0 fp32, one state
    (KV = HV * K * V elements) per slot or sequence."""
    i_n, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(indices + i_n).to(tl.int64)
    live = (slot >= 0) & (slot < num_slots)
    o = i_b * BLOCK + tl.arange(0, BLOCK)
    m = o < KV
    x = tl.load(pool + slot * stride_pool + o, mask=m & live, other=0.0)
    tl.store(h0 + i_n.to(tl.int64) * KV + o, x, mask=m)


@triton.jit
def _kda_pool_scatter_fwd_kernel(ht, indices, pool, stride_pool, num_slots, KV: tl.constexpr, BLOCK: tl.constexpr):
    """pool[indices[n]] = ht[n] where the index names a slot (negative: nothing written)."""
    i_n, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(indices + i_n).to(tl.int64)
    live = (slot >= 0) & (slot < num_slots)
    o = i_b * BLOCK + tl.arange(0, BLOCK)
    m = o < KV
    x = tl.load(ht + i_n.to(tl.int64) * KV + o, mask=m, other=0.0)
    tl.store(pool + slot * stride_pool + o, x, mask=m & live)


class StatePool:
    """The pool keywords of one `chunk_kda` call: validated at construction (no launch), then `load` fills `h0`
    (the ``[N, ...]`` initial states chunk_kda runs from) and `store` writes the final states into the pool. All
    three run eagerly under torch.compile (the host check reads the indices; a graph break around each), so the
    custom op between them stays in the graph and mutates nothing."""

    @torch.compiler.disable
    def __init__(self, pool: torch.Tensor | None, indices: torch.Tensor | None, inplace: bool, p: KDAProblem,
                 device: torch.device):
        validate_state_pool(pool, indices, inplace, p, device)
        self.pool, self.indices, self.inplace = pool, indices, inplace
        self.h0 = torch.empty((p.N, *pool.shape[1:]), dtype=torch.float32, device=device)

    def _copy(self, kernel, src: torch.Tensor, dst: torch.Tensor) -> None:
        BLOCK, num_warps = pool_copy_config(arch_of(self.pool.device))
        KV = self.pool[0].numel()
        kernel[(self.h0.shape[0], cdiv(KV, BLOCK))](
            src, self.indices, dst, self.pool.stride(0), self.pool.shape[0], KV=KV, BLOCK=BLOCK, num_warps=num_warps)

    @torch.compiler.disable
    def load(self) -> None:
        """h0 <- the named slots (the pool itself, in order, without indices)."""
        if self.indices is None:
            self.h0.copy_(self.pool)
        else:
            self._copy(_kda_pool_gather_fwd_kernel, self.pool, self.h0)

    @torch.compiler.disable
    def store(self, out: tuple) -> tuple:
        """chunk_kda's result `out` (o, final_state[, h]) with the final states written into the pool under
        inplace_final_state, where the pool itself takes final_state's place; unchanged otherwise."""
        if not self.inplace:
            return out
        ht = out[1].detach()
        if self.indices is None:
            self.pool.copy_(ht)
        else:
            self._copy(_kda_pool_scatter_fwd_kernel, ht, self.pool)
        return (out[0], self.pool, *out[2:])

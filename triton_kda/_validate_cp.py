"""Input validation of ``chunk_kda``'s context parallel: the ``cp_context`` argument and its process group.

``_check_cp_context`` (called by `validate_chunk_kda`) accepts a context from `triton_kda.build_cp_context` or fla's
``build_cp_context`` usable by this process for q, and returns its local boundaries, which replace the caller's
``cu_seqlens``; ``check_group`` (also used by `triton_kda.cp`) checks that a torch.distributed process group is
initialized and holds this process. Both raise a ``TypeError``/``ValueError`` naming the argument, on the host.
"""

from __future__ import annotations

from triton_kda._checks import _describe, _require_index_tensor


def check_group(group, name: str) -> tuple[int, int]:
    """(rank, world size) of this process in `group`, a torch.distributed ProcessGroup it belongs to; `name` is the
    argument's name in the messages."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"`{name}` needs an initialized torch.distributed process group (dist.init_process_group), "
                         f"but torch.distributed is not initialized in this process.")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"`{name}` must be a torch.distributed ProcessGroup this process belongs to (e.g. "
                        f"dist.group.WORLD or one from dist.new_group), got {type(group).__name__} ({group!r}).")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError(f"`{name}` is a process group ({world_size} ranks) that this process (global rank "
                         f"{dist.get_rank()}) is not a member of: use the group of this rank.")
    return rank, world_size


_CP_FIELDS = ("group", "cu_seqlens", "cu_seqlens_cpu", "layout")
_CP_LAYOUT_FIELDS = {"contiguous": ("pre_num_ranks", "post_num_ranks"),
                     "zigzag": ("part_len", "front_num_seqs", "pre_num_ranks_by_part", "post_num_ranks_by_part")}


def _check_cp_context(cp_context, q, initial_state, output_final_state: bool, cu_seqlens, cu_seqlens_cpu):
    """A context from `triton_kda.build_cp_context` or fla's `build_cp_context`, usable by this process for q.
    Returns (cu_seqlens, cu_seqlens_cpu, n_states): the context's local boundaries, which replace the caller's, and
    the number of initial states the call takes (the global sequences; None for an fla context)."""
    source = "a context from triton_kda.build_cp_context (or fla.ops.cp.build_cp_context)"
    layout = getattr(cp_context, "layout", None)
    missing = [f for f in _CP_FIELDS + _CP_LAYOUT_FIELDS.get(layout, ()) if not hasattr(cp_context, f)]
    if missing:
        raise TypeError(f"`cp_context` must be {source}, got {type(cp_context).__name__} without the field(s) "
                        f"{missing}.")
    if layout not in _CP_LAYOUT_FIELDS:
        raise ValueError(f"`cp_context.layout` must be 'contiguous' or 'zigzag', got {layout!r}.")
    rank, world_size = check_group(cp_context.group, "cp_context.group")
    built = (getattr(cp_context, "rank", None), getattr(cp_context, "world_size", None))
    if built != (None, None) and built != (rank, world_size):
        raise ValueError(f"`cp_context` was built for rank {built[0]} of a {built[1]}-rank group, but this process is "
                         f"rank {rank} of the {world_size}-rank `cp_context.group`: a context from another group or "
                         f"rank; build it on this rank with its own group.")
    local, local_cpu = cp_context.cu_seqlens, cp_context.cu_seqlens_cpu
    _require_index_tensor("cp_context.cu_seqlens", local)
    if local.device != q.device:
        raise ValueError(f"`cp_context.cu_seqlens` must be on q's device {q.device}, got device {local.device}.")
    if cu_seqlens is not None and cu_seqlens is not local and cu_seqlens.shape != local.shape:
        raise ValueError(f"under context parallel `cu_seqlens` must be None or the context's local boundaries "
                         f"`cp_context.cu_seqlens` ({local.shape[0]} boundaries), which replace it; got "
                         f"{cu_seqlens.shape[0]} boundaries (the global cu_seqlens goes to build_cp_context).")
    if cu_seqlens_cpu is not None and local_cpu is None:
        local_cpu = cu_seqlens_cpu
    if local_cpu is not None:
        _require_index_tensor("cp_context.cu_seqlens_cpu", local_cpu)
        T_local = int(local_cpu[-1])
        if q.shape[1] != T_local:
            raise ValueError(f"`q` must hold this rank's slice of the global batch, {T_local} tokens (`cp_context`: "
                             f"rank {rank} of {world_size}, layout {layout!r}), got T={q.shape[1]} ({_describe(q)}).")
    n_states = getattr(cp_context, "num_seqs_global", None)
    if (initial_state is not None or output_final_state) and n_states is None:
        raise ValueError("`initial_state` and `output_final_state=True` under context parallel need a context from "
                         "triton_kda.build_cp_context (it knows the global sequences); this cp_context "
                         f"({type(cp_context).__name__}) does not.")
    return local, local_cpu, n_states

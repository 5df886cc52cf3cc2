"""fp64 PyTorch oracle for KDA and the comparison harness shared by the tests and `kda-check`.

`reference.kda` holds the oracle (kda_recurrent, kda_chunk and the activations), `reference.harness` the error
metrics and input factories.
"""
from reference.kda import KDAChunkResult, kda_beta_ref, kda_chunk, kda_gate_ref, kda_recurrent, l2norm_ref

__all__ = ["KDAChunkResult", "kda_beta_ref", "kda_chunk", "kda_gate_ref", "kda_recurrent", "l2norm_ref"]

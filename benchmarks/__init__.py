"""Benchmarks of ``chunk_kda``: ours against fla, side by side on one GPU.

- ``python -m benchmarks.run``: named shape suites, oracle-gated timings, JSONL rows (``benchmarks/run.py``: the CLI
  and the run's order; ``benchmarks.cases`` builds and times one case, ``benchmarks.checks`` holds its fp64 oracle
  gates, ``benchmarks.impls`` the implementations by name, ``benchmarks.timing`` how calls are timed,
  ``benchmarks.provenance`` versions and GPU, ``benchmarks.cli`` the shared argparse types, progress lines and
  JSONL files).
- ``python -m benchmarks.report``: markdown tables and PNG plots from those rows.
- ``python -m benchmarks.gpu_check``: one device call with correctness checks and a few timings.
- ``benchmarks.suites`` (shapes, flag sets) and ``benchmarks.model`` (bytes/FLOPs model, roofline) are plain data and
  pure functions; ``python -m benchmarks.fwd_model`` prints the byte, FLOP and chain floors of the forward's designs
  from them, ``python -m benchmarks.bwd_model`` those of the training step's designs kernel by kernel. Importing this
  package touches no GPU.
"""

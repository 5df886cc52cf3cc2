"""`kda-check`: numerical regression of every chunk_kda backend against the fp64 oracle, and `kda-portability`:
ahead-of-time compiles of every kernel launch configuration for the CUDA GPU's architecture (sm_89 and sm_90
without one) or any of sm_80, 86, 89, 90, 100 and 120 (`--all`: every one).

Modules: `grid` (configurations), `runner` (one config on every backend vs the oracle, thresholds), `table`
(results table, CSV/JSON, exit code), `baseline` (saved errors and regression detection), `portability` (compiles,
shared memory, registers and spills), `cli` (the two console scripts). Needs the `check` extra (pandas, tqdm).
"""

"""The nvcc targets of the compiled backends and the compute capabilities they run on (shared by build.py, which
compiles them, and the backends, which declare where they run)."""

TARGETS = ("90a", "100a")
CAPABILITY_TARGETS = {(9, 0): "90a", (10, 0): "100a"}  # compute capability -> nvcc target

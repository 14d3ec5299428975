"""The planner: validate a recipe against a cluster, estimate memory and throughput, fit it to hardware.

Pure Python (standard library only): no nemo, torch, megatron or nemo_run import, so the CLI answers at once.
"""

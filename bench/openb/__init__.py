"""Scheduling quality on the openb trace (Alibaba cluster-trace-gpu-v2023), replayed through
Tessera's own fitting and placement code. Entry point: ``python -m bench.openb``."""

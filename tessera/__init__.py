"""Tessera: fractional and multi-card GPUs for Kubernetes (shared core and CLI)."""

__version__ = "0.1.0"

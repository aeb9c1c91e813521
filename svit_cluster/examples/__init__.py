"""Runnable examples: ``python -m svit_cluster.examples.<name>``."""

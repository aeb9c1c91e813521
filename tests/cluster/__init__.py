"""Tests of ``svit_cluster.cluster`` on a real local cluster (conftest.py)."""

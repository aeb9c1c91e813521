"""``python -m svit_cluster.cli``: the ``svit-cluster`` program (how the local
cluster starts its gateway and dispatchers with this interpreter)."""

from svit_cluster.cli import main

if __name__ == "__main__":
    main()

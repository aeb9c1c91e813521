"""svit_cluster: fenced, durable hosting of Svit processes across a cluster."""

__version__ = "0.1.0"
__all__ = ["__version__"]

"""Errors of the chaos harness, rooted in :class:`svit_cluster.errors.SvitError`.

* :class:`HarnessError` -- the harness could not do its job (a server did not
  come back, a cluster did not start, a control did not run). A run that hits
  one is **inconclusive**, never a pass.
* :class:`HistoryError` -- a history or log file is malformed (names file and line).
"""

from __future__ import annotations

from svit_cluster.errors import InvalidInput, UnavailableError

__all__ = ["HarnessError", "HistoryError"]


class HarnessError(UnavailableError):
    """The harness itself failed; the verdict of the run is ``inconclusive``.

    Fields: ``stage`` (``start``, ``inject``, ``heal``, ``dump``, ``control``, ...)
    and, where known, ``nemesis``.
    """


class HistoryError(InvalidInput):
    """A history or log JSONL file is malformed. Fields: ``path``, ``line``."""

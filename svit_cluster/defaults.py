"""Default values shared by the settings and the data path, without pydantic-settings.

:mod:`svit_cluster.settings` re-exports them; modules that every process actor
loads (the store) import them from here, so a Ray worker serving one process
does not load pydantic-settings and dotenv for a constant (issue 18 item 3).
"""

from __future__ import annotations

__all__ = ["DEFAULT_SNAPSHOT_EVERY"]

#: Commits between snapshots (``SVIT_SNAPSHOT_EVERY``); re-exported by ``settings``
#: and ``store``.
DEFAULT_SNAPSHOT_EVERY = 100

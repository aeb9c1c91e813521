"""The contract every fault keeps (:class:`Nemesis`) and what it acts on (:class:`NemesisContext`).

A nemesis turns one :class:`~svit_chaos.spec.NemesisSpec` into actions on a
:class:`~svit_chaos.target.FaultTarget`: :meth:`Nemesis.inject`, later
:meth:`Nemesis.heal`, and :meth:`Nemesis.healed` tells when the fault is over.
``inject`` and ``heal`` block (the runner calls them in a worker thread) and
return details for the history; ``heal`` is safe to call twice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..history import HistoryWriter
from ..spec import NemesisSpec
from ..stale import StaleWriter
from ..target import FaultTarget

__all__ = ["Nemesis", "NemesisContext"]


@dataclass
class NemesisContext:
    """What a nemesis acts on."""

    target: FaultTarget
    history: HistoryWriter
    processes: Sequence[str] = ()
    stale: StaleWriter | None = None


class Nemesis(ABC):
    """One fault: :meth:`inject`, then :meth:`heal`; :meth:`healed` tells when it is over.

    ``inject`` and ``heal`` block (the runner calls them in a worker thread)
    and return details for the history. ``heal`` must be safe to call twice.
    """

    #: Multiplies the runner's ``heal_timeout_s`` for this kind's heal.
    heal_timeout_factor: ClassVar[float] = 1.0

    def __init__(self, spec: NemesisSpec) -> None:
        self.spec = spec
        #: set by the runner when the run stopped before this window's end:
        #: heal only undoes the fault (nothing is waited for)
        self.interrupted = False

    @abstractmethod
    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        """Inject the fault; returns details for the history."""

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        return {}

    def healed(self, ctx: NemesisContext) -> bool:
        return True

"""A schedule as data: what to break (:class:`NemesisSpec`), when and for how long
(:class:`Window`), and the named, seeded list of windows (:class:`Schedule`).

All three are frozen and round-trip through JSON (a run directory's
``schedule.json``). A spec checks itself when built: an unknown kind, a host
kind without a host, or a ``load-host`` that loads nothing raises
:class:`~svit_cluster.errors.ConfigurationError` (the kinds are those of
:mod:`svit_chaos.kinds`). Times are seconds from the start of the run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from svit_cluster.errors import ConfigurationError

from .kinds import HOST_KINDS, KINDS

__all__ = ["NemesisSpec", "Schedule", "Window"]


@dataclass(frozen=True)
class NemesisSpec:
    """What to break. ``kind`` is one of :data:`KINDS`; the rest depends on it.

    Attributes:
        kind: the nemesis kind.
        host: target host (host kinds).
        service: ``"etcd"`` or ``"redis"`` (``slow-link``).
        mode: ``"drop"`` or ``"stall"`` (``cut-*``).
        delay_ms: one-way delay (``slow-link``).
        target: ``kill-redis-master``: the index of the workload process whose
            slot's master is killed; ``partition-etcd-member``: ``leader`` or
            ``follower``.
        cpu: busy-loop processes (``load-host``).
        memory_mib: MiB a ``load-host`` memory process holds (0: none).
    """

    kind: str
    host: str | None = None
    service: str | None = None
    mode: str | None = None
    delay_ms: int = 0
    target: str | None = None
    cpu: int = 0
    memory_mib: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"unknown nemesis {self.kind!r}; kinds: {', '.join(KINDS)}")
        if self.kind in HOST_KINDS and not self.host:
            raise ConfigurationError(f"nemesis {self.kind} needs a host")
        if self.kind == "load-host" and (self.cpu < 0 or self.memory_mib < 0
                                         or self.cpu + self.memory_mib == 0):
            raise ConfigurationError("nemesis load-host needs cpu >= 1 or memory_mib >= 1")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, 0)}

    @property
    def label(self) -> str:
        parts = [self.kind]
        if self.host:
            parts.append(self.host)
        if self.mode:
            parts.append(self.mode)
        if self.service and self.kind == "slow-link":
            parts.append(f"{self.service}+{self.delay_ms}ms")
        if self.target and self.kind == "partition-etcd-member":
            parts.append(self.target)
        if self.kind == "load-host":
            parts.append(f"{self.cpu}cpu+{self.memory_mib}MiB")
        return " ".join(parts)


@dataclass(frozen=True)
class Window:
    """A nemesis active from ``start_s`` for ``duration_s`` seconds (run time)."""

    start_s: float
    duration_s: float
    spec: NemesisSpec

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def to_json(self) -> dict[str, Any]:
        return {"start_s": round(self.start_s, 3), "duration_s": round(self.duration_s, 3),
                "spec": self.spec.to_json()}


@dataclass(frozen=True)
class Schedule:
    """A named, seeded list of windows (sorted by start)."""

    name: str
    seed: int
    windows: tuple[Window, ...]
    duration_s: float

    def kinds(self) -> Counter[str]:
        return Counter(w.spec.kind for w in self.windows)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "duration_s": self.duration_s,
                "windows": [w.to_json() for w in self.windows]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Schedule:
        windows = tuple(Window(float(w["start_s"]), float(w["duration_s"]),
                               NemesisSpec(**w["spec"])) for w in doc["windows"])
        return cls(str(doc["name"]), int(doc["seed"]), windows, float(doc["duration_s"]))

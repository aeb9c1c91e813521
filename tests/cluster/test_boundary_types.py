"""Every value that crosses the Ray boundary has a declared, checked shape (no Ray).

Ray pickles the arguments of a Ray actor's constructor and methods and their
answers; strict mypy checks both sides of a call only where those types say what
they hold. This test reads the type hints (``typing.get_type_hints``) of
``__init__`` and every public method of the Ray actor classes, and walks every
type they reach: generic arguments, union members, and the fields of the
dataclasses and TypedDicts among them. It fails on ``Any`` (``dict[str, Any]``
included), on a container without its element types (a bare ``dict``), on a
class whose fields are not declared (neither a dataclass, a TypedDict, an enum nor
a scalar), and on a dataclass that is not frozen.

A private method (``_name``) is never called through Ray: callers name public
methods only.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Callable as CallableABC
from typing import Any, ForwardRef, TypeVar, get_args, get_origin, is_typeddict

import pytest

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent import HostAgent
from svit_cluster.ports import PortCallRecord

#: Every class Ray runs as an actor (``ray.remote(cls)``): the process actor
#: (``cluster._spare_pool``) and the host agent (``cluster.bootstrap``). The
#: gateway, the dev cluster and the dispatcher define none.
RAY_ACTORS: tuple[type, ...] = (ProcessActor, HostAgent)

#: ``Class.field`` -> why it may hold an untyped value. Empty: nothing that
#: crosses is exempt.
ALLOWED: dict[str, str] = {}

#: Names the actor modules import under ``TYPE_CHECKING`` only.
_TYPE_CHECKING_NAMES: dict[str, Any] = {"PortCallRecord": PortCallRecord}

_SCALARS = (str, bytes, int, float, bool, type(None))
#: Containers whose element types must be named.
_CONTAINERS = (dict, list, tuple, set, frozenset, Mapping, Sequence)


def _declared(tp: Any) -> bool:
    """A class whose fields are declared: a dataclass or a TypedDict."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_typeddict(tp))


def _hints(obj: Any) -> dict[str, Any]:
    return typing.get_type_hints(obj, localns=_TYPE_CHECKING_NAMES)


def remote_signatures(cls: type) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(Class.method, hints)`` of ``__init__`` and every public method of ``cls``."""
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name == "__init__" or not name.startswith("_"):
            yield f"{cls.__name__}.{name}", _hints(fn)


def offences(tp: Any, where: str, seen: set[type]) -> Iterator[str]:
    """What is untyped in ``tp`` and in every type it reaches (``where``: the path)."""
    if tp is Any:
        yield f"{where}: Any"
        return
    if isinstance(tp, (str, ForwardRef)):
        # a recursive alias names itself in quotes (Value, JsonValue); its members
        # are walked where the alias is first met
        if str(getattr(tp, "__forward_arg__", tp)) == "Any":
            yield f"{where}: Any"
        return
    if isinstance(tp, TypeVar):
        return  # the generic argument bound to it is walked beside it
    origin = get_origin(tp)
    if origin is CallableABC:
        yield f"{where}: a callable (code, not data)"
        return
    if origin is not None:
        for arg in get_args(tp):
            yield from offences(arg, where, seen)
        if _declared(origin):
            yield from offences(origin, where, seen)  # a generic class's own fields
        return
    if tp in _CONTAINERS or tp in (typing.Dict, typing.List, typing.Tuple):  # noqa: UP006
        yield f"{where}: bare {getattr(tp, '__name__', tp)} (element types unnamed)"
        return
    if not isinstance(tp, type) or tp in seen:
        return
    seen.add(tp)
    if tp in _SCALARS or issubclass(tp, enum.Enum):
        return
    if not _declared(tp):
        yield f"{where} -> {tp.__qualname__}: its fields are not declared"
        return
    if dataclasses.is_dataclass(tp) and not tp.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        yield f"{where} -> {tp.__qualname__}: a dataclass that is not frozen"
    for name, hint in _hints(tp).items():
        key = f"{tp.__qualname__}.{name}"
        if key not in ALLOWED:
            yield from offences(hint, f"{where} -> {key}", seen)


def boundary_offences(classes: Sequence[type]) -> list[str]:
    found: list[str] = []
    for cls in classes:
        for method, hints in remote_signatures(cls):
            for param, hint in hints.items():
                found += offences(hint, f"{method}({param})", set())
    return found


def test_nothing_untyped_crosses_the_ray_boundary() -> None:
    assert boundary_offences(RAY_ACTORS) == []


def test_every_allowed_field_exists_and_says_why() -> None:
    """The allow-list names real fields, each with its reason (a stale entry fails)."""
    reached: set[str] = set()

    def fields(tp: Any, seen: set[type]) -> None:
        for arg in get_args(tp):
            fields(arg, seen)
        tp = get_origin(tp) or tp
        if _declared(tp) and tp not in seen:
            seen.add(tp)
            for name, hint in _hints(tp).items():
                reached.add(f"{tp.__qualname__}.{name}")
                fields(hint, seen)

    for cls in RAY_ACTORS:
        for _method, hints in remote_signatures(cls):
            for hint in hints.values():
                fields(hint, set())
    for key, why in ALLOWED.items():
        assert key in reached and why.strip(), key


# -- the probe itself (negative controls) -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Typed:
    n: int
    names: list[str]


@dataclasses.dataclass(frozen=True)
class _Loose:
    doc: dict[str, Any]


@dataclasses.dataclass
class _Mutable:
    n: int


class _Opaque:
    pass


class _Actor:
    def __init__(self, config: dict[str, Any]) -> None: ...

    def bare(self, doc: dict) -> None: ...  # type: ignore[type-arg]

    def nested(self) -> list[_Loose]: ...

    def optional(self, value: Any | None = None) -> _Typed: ...

    def mutable(self) -> _Mutable: ...

    def opaque(self, thing: _Opaque) -> None: ...

    def callback(self, by: Callable[[], None] | None = None) -> None: ...

    def fine(self, n: int, typed: _Typed, names: Mapping[str, list[int]] | None
             ) -> tuple[int, str]: ...

    def _private(self, meta: dict[str, Any]) -> None: ...


def test_the_probe_finds_each_kind_of_untyped_value() -> None:
    found = boundary_offences([_Actor])
    assert found == [
        "_Actor.__init__(config): Any",
        "_Actor.bare(doc): bare dict (element types unnamed)",
        "_Actor.callback(by): a callable (code, not data)",
        "_Actor.mutable(return) -> _Mutable: a dataclass that is not frozen",
        "_Actor.nested(return) -> _Loose.doc: Any",
        "_Actor.opaque(thing) -> _Opaque: its fields are not declared",
        "_Actor.optional(value): Any",
    ], found


@pytest.mark.parametrize("cls", RAY_ACTORS, ids=lambda c: c.__name__)
def test_the_probe_reads_every_remote_method(cls: type) -> None:
    """Each actor class has its constructor and its public methods read."""
    names = [m for m, _ in remote_signatures(cls)]
    assert f"{cls.__name__}.__init__" in names and len(names) > 10

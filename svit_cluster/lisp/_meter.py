"""Deterministic accounting for one activation: fuel, guest memory, deadline.

Fuel (``Limits.max_fuel``) is the deterministic bound. One fuel unit is spent
per evaluated form: each literal, symbol lookup, special form and function
application costs 1 (the operator symbol of an application is a lookup, so
``(+ 1 2)`` costs 4, and a quoted datum is one form). The call of ``main``
costs 1; the implicit ``()`` of an ``if`` without else and the prologue that
fills parameter defaults are free. A builtin additionally spends 1 unit per 64
elements or bytes it touches (``n // 64`` for ``n`` touched), and ``apply``
spends the same for the list it spreads; ``jq`` spends 1 unit per 8 filter
evaluation steps (:mod:`svit_cluster.lisp._jq`). A helper that calls a guest
function (``result-map``, ``dispatch``, ...) is charged as an application, and
the function it calls as any call. The same program on the same input
therefore spends the same fuel and fails at the same step on every host: the
check (``fuel > max_fuel`` fails) runs whenever a form is charged; literal and
variable arguments are charged together with their application.

Guest memory (``Limits.max_guest_memory``) counts abstract units *allocated*
over the whole activation (never freed): a list, array or map costs 16 plus
8 per element (16 per map entry), a string 16 plus its UTF-8 bytes, an integer
wider than 64 bits its byte width. Closures and call frames are bounded by the
call stack and fuel instead.

Wall-clock time (``Limits.max_execution_millis``) is checked against the
injected clock every 1024 fuel units; it is a safety net, not the
deterministic bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from svit_cluster.lisp._errors import execution_limit, relocate, resource_limit
from svit_cluster.values import I64_MAX, I64_MIN, Limits

__all__ = ["CLOCK_INTERVAL", "Meter", "Run"]

#: Fuel units between two wall-clock checks.
CLOCK_INTERVAL = 1024


class Meter:
    """Fuel, memory and deadline accounting for one activation.

    One meter is shared by the activation's top-level run and every nested
    ``exec``, so composition can neither reset the fuel nor the deadline.

    Args:
        limits: the process limits (fuel, memory, time and stack bounds).
        clock: monotonic seconds; the deadline is ``clock() +
            max_execution_millis / 1000`` taken at construction.

    Attributes:
        fuel_used: fuel units spent so far (readable after a run).
        memory_used: guest memory units allocated so far.
    """

    __slots__ = ("clock", "deadline", "exec_level", "fuel_used", "limits", "memory_used")

    def __init__(self, limits: Limits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.deadline = clock() + limits.max_execution_millis / 1000.0
        self.fuel_used = 0
        self.memory_used = 0
        self.exec_level = 0

    def check_time(self) -> None:
        """Raise if the wall-clock deadline has passed.

        Raises:
            LimitExceeded: (``execution_limit_exceeded``) "execution time".
        """
        if self.clock() > self.deadline:
            raise execution_limit(
                "execution time", f"max_execution_millis={self.limits.max_execution_millis}"
            )


class Run:
    """Mutable state of one ``run_main`` call (one fresh global environment).

    Builtins receive the run as their first argument: it carries the host, the
    globals, and the counters, which are copied from the :class:`Meter` at the
    start and written back at the end (and around a nested ``exec``).
    """

    __slots__ = (
        "check_at",
        "clock",
        "deadline",
        "foreign",
        "fuel",
        "g",
        "hcache",
        "host",
        "ihi",
        "ilo",
        "input",
        "max_call",
        "max_depth",
        "max_fuel",
        "max_mem",
        "max_ns",
        "max_vs",
        "mem",
        "meter",
        "ndefs",
        "ns_preset",
        "where",
    )

    def __init__(
        self, meter: Meter, host: Any, input: Any, where: str, preset_names: int = 0
    ) -> None:
        lim = meter.limits
        self.meter = meter
        self.host = host
        self.input = input
        self.where = where
        self.g: dict[str, Any] = {}
        # Entries of the guest namespace: the runtime's own names, then each define.
        self.ndefs = preset_names
        self.ns_preset = preset_names
        self.foreign: Any = None
        self.hcache: dict[int, tuple[Any, int]] = {}
        self.clock = meter.clock
        self.deadline = meter.deadline
        self.max_fuel = lim.max_fuel
        self.max_mem = lim.max_guest_memory
        self.max_ns = lim.max_namespace_entries
        self.max_call = lim.max_call_stack
        self.max_vs = lim.max_value_stack
        self.max_depth = lim.max_value_depth
        bits = max(lim.max_integer_bits, 1)
        self.ihi = (1 << (bits - 1)) - 1
        self.ilo = -(1 << (bits - 1))
        self.fuel = meter.fuel_used
        self.mem = meter.memory_used
        self.check_at = min(self.max_fuel, self.fuel + CLOCK_INTERVAL)

    # -- fuel and time -----------------------------------------------------
    def tick(self, where: str) -> None:
        """Slow path of the fuel check; ``where`` locates a failure.

        Raises:
            LimitExceeded: (``execution_limit_exceeded``) "fuel" when more than
                ``max_fuel`` units are spent, "execution time" past the deadline.
        """
        if self.fuel > self.max_fuel:
            error = execution_limit("fuel", f"max_fuel={self.max_fuel}")
        elif self.clock() > self.deadline:
            error = execution_limit(
                "execution time", f"max_execution_millis={self.meter.limits.max_execution_millis}"
            )
        else:
            self.check_at = min(self.max_fuel, self.fuel + CLOCK_INTERVAL)
            return
        raise relocate(error, where, None)

    def touch(self, n: int) -> None:
        """Charge 1 fuel unit per 64 elements or bytes a builtin touched."""
        if n > 63:
            self.fuel += n >> 6

    # -- memory and integers --------------------------------------------------
    def alloc(self, units: int) -> None:
        """Account ``units`` of guest memory.

        Raises:
            LimitExceeded: (``resource_limit_exceeded``) "guest memory".
        """
        self.mem += units
        if self.mem > self.max_mem:
            raise resource_limit("guest memory", f"max_guest_memory={self.max_mem} units")

    def big(self, value: int) -> int:
        """Check an integer result against ``max_integer_bits``; charge wide ones.

        Raises:
            LimitExceeded: (``resource_limit_exceeded``) "integer bits".
        """
        if value < self.ilo or value > self.ihi:
            raise resource_limit(
                "integer bits", f"max_integer_bits={self.meter.limits.max_integer_bits}"
            )
        if value < I64_MIN or value > I64_MAX:
            self.alloc((value.bit_length() + 7) >> 3)
        return value

    # -- globals ------------------------------------------------------------
    def define(self, name: str, value: Any, where: str) -> None:
        """Bind a global (``define``), counting new names.

        The guest namespace holds ``preset_names`` runtime names before the
        script runs (:data:`svit_cluster.lisp._builtins.GUEST_SCOPE`); defining a
        new name when it already holds ``max_namespace_entries`` entries fails,
        as Ketos's namespace-size restriction does in the reference.

        Raises:
            LimitExceeded: (``resource_limit_exceeded``) "guest namespace".
        """
        g = self.g
        if name not in g:
            if self.ndefs >= self.max_ns:
                error = resource_limit(
                    "guest namespace",
                    f"max_namespace_entries={self.max_ns} namespace entries, "
                    f"{self.ns_preset} of them the runtime's names",
                )
                raise relocate(error, where, None)
            self.ndefs += 1
        g[name] = value

    # -- meter synchronisation --------------------------------------------------
    def sync_out(self) -> None:
        """Write the counters back to the shared meter (before a nested exec, at the end)."""
        self.meter.fuel_used = self.fuel
        self.meter.memory_used = self.mem

    def sync_in(self) -> None:
        """Reload the counters from the shared meter (after a nested exec)."""
        self.fuel = self.meter.fuel_used
        self.mem = self.meter.memory_used
        self.check_at = min(self.max_fuel, self.fuel + CLOCK_INTERVAL)

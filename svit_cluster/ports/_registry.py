"""The port registry: host-side dispatch and the ``/ports`` catalog, from one source.

A :class:`PortRegistry` is built once per host from the operator's
:class:`~svit_cluster.ports.PortsConfig`. It gives

* :meth:`PortRegistry.catalog` -- the read-only descriptors installed under
  ``/ports/<name>`` of every process this host serves (replacing whatever a
  snapshot carried: a stale catalog never grants anything, since dispatch
  only ever consults the registry), and
* :meth:`PortRegistry.call` -- one port call of an activation: bounded input,
  one run of the host implementation, a bounded result, and a record of the
  call (with the owner's fencing token) in :class:`PortCall`.

Semantics follow the reference's docs/ports.md: a port call suspends the
guest, runs the host implementation once, and the guest continues with the
recorded result; the activation still commits once, and the external effect is
outside the commit (hence :func:`idempotency_key`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from svit_cluster.activation import PortContext, idempotency_key
from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed, SvitError
from svit_cluster.ports._config import PortsConfig
from svit_cluster.process import PORT_DESCRIPTOR_FIELDS
from svit_cluster.values import Value, canonical_json, to_plain_json

__all__ = [
    "CONTRACT_VERSION",
    "Port",
    "PortCall",
    "PortCallRecord",
    "PortContext",
    "PortRegistry",
    "idempotency_key",
]

log = logging.getLogger("svit_cluster.ports")

#: Contract version of the built-in port descriptors (descriptor field ``version``,
#: as the reference names it).
CONTRACT_VERSION = "v1"

#: Descriptor fields, as the reference lists them (docs/ports.md "Registry and catalog").
DESCRIPTOR_FIELDS = tuple(sorted(PORT_DESCRIPTOR_FIELDS))


class PortCallRecord(TypedDict):
    """:meth:`PortCall.to_dict`: the same fields, JSON-safe."""

    process_id: str
    port: str
    call_index: int
    version: int
    token: int
    idempotency_key: str
    ok: bool
    input_bytes: int
    output_bytes: int
    error: str


@dataclass(frozen=True, slots=True)
class PortCall:
    """The record of one port call (logged with the fencing token; kept on the result).

    Attributes:
        process_id: the calling process.
        port: the port name.
        call_index: 0-based index within the activation.
        version: the version being computed.
        token: the owner's fencing token when the call ran.
        idempotency_key: the key sent with effects (``http``: ``Idempotency-Key``).
        ok: whether the call returned a result.
        input_bytes, output_bytes: canonical JSON sizes.
        error: the error code when ``ok`` is False.
    """

    process_id: str
    port: str
    call_index: int
    version: int
    token: int
    idempotency_key: str
    ok: bool
    input_bytes: int
    output_bytes: int = 0
    error: str = ""

    def to_dict(self) -> PortCallRecord:
        return {"process_id": self.process_id, "port": self.port,
                "call_index": self.call_index, "version": self.version,
                "token": self.token, "idempotency_key": self.idempotency_key, "ok": self.ok,
                "input_bytes": self.input_bytes, "output_bytes": self.output_bytes,
                "error": self.error}


class Port(Protocol):
    """One host-owned port implementation."""

    name: str

    def descriptor(self) -> dict[str, Value]:
        """The ``/ports/<name>`` descriptor (fields :data:`DESCRIPTOR_FIELDS`)."""
        ...

    def call(self, input: Value, ctx: PortContext) -> Value:
        """Run the port once. Raises ScriptFailed (an expected, sanitized error) or
        LimitExceeded."""
        ...


@dataclass
class PortRegistry:
    """The frozen set of ports one host grants, with the per-activation bounds.

    Args:
        ports: name -> implementation.
        config: the bounds (``max_calls``, ``max_input_bytes``,
            ``max_output_bytes``, ``fuel_per_call``).
        on_call: called with each :class:`PortCall` (default: log at INFO).
    """

    ports: dict[str, Port] = field(default_factory=dict)
    config: PortsConfig = field(default_factory=PortsConfig)
    on_call: Callable[[PortCall], None] | None = None

    def catalog(self) -> dict[str, Value]:
        """``{name: descriptor}`` for ``/ports`` (an empty map grants nothing)."""
        out: dict[str, Value] = {}
        for name in sorted(self.ports):
            desc = dict(self.ports[name].descriptor())
            desc["limits"] = {**dict(desc.get("limits") or {}),  # type: ignore[arg-type]
                              "max_calls_per_activation": self.config.max_calls,
                              "max_input_bytes": self.config.max_input_bytes,
                              "max_output_bytes": self.config.max_output_bytes}
            out[name] = desc
        return out

    @property
    def fuel_per_call(self) -> int:
        return self.config.fuel_per_call

    @property
    def max_calls(self) -> int:
        """At most this many port calls per activation (``config.max_calls``)."""
        return self.config.max_calls

    def grants(self, name: str) -> bool:
        """Whether this host grants a port named ``name``."""
        return name in self.ports

    def call(self, name: str, input: Value, ctx: PortContext, *,
             record: Callable[[PortCall], None] | None = None) -> Value:
        """One port call: check, run once, bound and record the result.

        The :class:`PortCall` goes to ``record`` (the calling activation) and to
        :attr:`on_call` (the host), whether the call succeeded or not.

        Raises:
            ScriptFailed: (``script_failed``) no port ``name`` is granted by
                this host, or the port reported an expected error.
            LimitExceeded: (``resource_limit_exceeded``) too many calls in the
                activation (checked by the caller, see ``max_calls``), the
                input or the result above its byte bound.
        """
        port = self.ports.get(name)
        if port is None:
            raise ScriptFailed(f"no port named {name[:200]} is granted to this process")
        raw_in = canonical_json(to_plain_json(input))
        if len(raw_in) > self.config.max_input_bytes:
            raise LimitExceeded(f"port {name} input exceeds max_input_bytes="
                                f"{self.config.max_input_bytes}", limit="port input bytes")
        fields = dict(process_id=ctx.process_id, port=name, call_index=ctx.call_index,
                      version=ctx.version,
                      token=ctx.token, idempotency_key=ctx.idempotency_key,
                      input_bytes=len(raw_in))
        try:
            result = port.call(input, ctx)
            size = len(canonical_json(to_plain_json(result)))
            if size > self.config.max_output_bytes:
                raise LimitExceeded(f"port {name} result exceeds max_output_bytes="
                                    f"{self.config.max_output_bytes}",
                                    limit="port output bytes")
        except SvitError as exc:
            self._record(PortCall(ok=False, error=str(exc.code), **fields), record)  # type: ignore[arg-type]
            raise
        except Exception as exc:  # host bug: fail the activation, never leak its text
            self._record(PortCall(ok=False, error=str(ErrorCode.INTERNAL), **fields),  # type: ignore[arg-type]
                         record)
            raise ScriptFailed(f"port {name} failed ({type(exc).__name__})") from exc
        self._record(PortCall(ok=True, output_bytes=size, **fields), record)  # type: ignore[arg-type]
        return result

    def _record(self, call: PortCall, record: Callable[[PortCall], None] | None) -> None:
        if record is not None:
            record(call)
        log.info("port call %s #%d of %s v%d token=%d key=%s ok=%s %s", call.port,
                 call.call_index, call.process_id, call.version, call.token, call.idempotency_key,
                 call.ok, call.error)
        if self.on_call is not None:
            self.on_call(call)

"""Canonical svit-control@1 wire types (pydantic v2).

These models are the single source of the JSON shapes: ``schemas/`` is
generated from them (``python -m svit_cluster.control.schema``).

Versioning rule (the only place it is written down): within major
``svit-control@1``, decoders **ignore unknown fields** on every message
(envelope, command, response, outcome, activation); new fields are additive
and optional. A new ``operation`` is never silently accepted: it fails decoding
unless both sides negotiated the capability that introduces it (gateway
``initialize``). A breaking change needs a new major, ``svit-control@2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    StringConstraints,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, SvitError
from svit_cluster.process import (
    MAX_DELAY_MS,
    PROTOCOL,
    Value,
    decode_value,
    encode_value,
    strict_json_loads,
    validate_process_id,
)

__all__ = [
    "PROTOCOL",
    "ActivateCommand",
    "Activation",
    "CancelMessage",
    "Committed",
    "Conflict",
    "ControlRequest",
    "ControlResponse",
    "DelayedMessage",
    "Failure",
    "LogRecord",
    "Message",
    "Outcome",
    "Rejected",
    "decode_request",
    "decode_response",
    "wire_message",
]

#: Placeholder emitted by pydantic; ``schema.py`` swaps it for a ``$ref``.
TAGGED_PLACEHOLDER: dict[str, Any] = {"x-svit-tagged-value": True}
TAGGED_VALUE_DEF: dict[str, Any] = {
    "description": "A tagged Svit value (process core: values).",
    "oneOf": [
        {
            "type": "object",
            "properties": {"type": {"const": "null"}},
            "required": ["type"],
        },
        {
            "type": "object",
            "properties": {"type": {"const": "bool"}, "value": {"type": "boolean"}},
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "integer"},
                "value": {
                    "type": "integer",
                    "minimum": -9223372036854775808,
                    "maximum": 9223372036854775807,
                },
            },
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {"type": {"const": "number"}, "value": {"type": "number"}},
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {"type": {"const": "string"}, "value": {"type": "string"}},
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "array"},
                "value": {"type": "array", "items": {"$ref": "#/$defs/TaggedValue"}},
            },
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "map"},
                "value": {
                    "type": "object",
                    "additionalProperties": {"$ref": "#/$defs/TaggedValue"},
                },
            },
            "required": ["type", "value"],
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "script"},
                "value": {
                    "type": "object",
                    "properties": {
                        "source": {"type": "string"},
                        "documentation": {"type": ["string", "null"]},
                    },
                    "required": ["source"],
                },
            },
            "required": ["type", "value"],
        },
    ],
}


def _decode_tagged(data: Any) -> Value:
    if isinstance(data, _Decoded):
        return data.value
    try:
        return decode_value(data)
    except SvitError as exc:
        raise ValueError(f"{exc.code}: {exc.message}") from None


class _Decoded:
    """Marks an already-decoded value so model construction from Python skips decoding."""

    __slots__ = ("value",)

    def __init__(self, value: Value) -> None:
        self.value = value


def wire(value: Value) -> Any:
    """Wrap a plain value for model construction from Python code."""
    return _Decoded(value)


TaggedValue = Annotated[
    Any,
    BeforeValidator(_decode_tagged),
    PlainSerializer(encode_value, return_type=dict),
    WithJsonSchema(TAGGED_PLACEHOLDER),
]

Identifier = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,128}$", min_length=1, max_length=128)
]


def _check_pid(v: Any) -> str:
    try:
        return validate_process_id(v)
    except SvitError as exc:
        raise ValueError(exc.message) from None


ProcessId = Annotated[
    str,
    BeforeValidator(_check_pid),
    WithJsonSchema({"type": "string", "pattern": "^svit://\\S+$", "maxLength": 256}),
]
#: A process version: 0..2**63-1 (the host's version range, see process.MAX_VERSION).
Version = Annotated[int, Field(ge=0, le=2**63 - 1, strict=True)]
#: A version a client expects: the reference's u64 range, 0..2**64-1. A value
#: above the host's version range is well formed and simply conflicts (no
#: process can be at it), so it is answered like any stale expectation.
ExpectedVersion = Annotated[int, Field(ge=0, le=2**64 - 1, strict=True)]
Hash = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

_LENIENT = ConfigDict(extra="ignore", strict=True, frozen=True)


class ActivateCommand(BaseModel):
    """Run ``/lib/<script>`` with ``input`` as one transaction."""

    model_config = _LENIENT
    operation: Literal["activate"]
    script: str
    input: TaggedValue


# One operation today. New operations join this union (discriminated by
# ``operation``) only behind a negotiated capability.
Command = ActivateCommand


class ControlRequest(BaseModel):
    """The svit-control@1 request envelope (control protocol: VAST)."""

    model_config = _LENIENT
    protocol: Literal["svit-control@1"]
    client_id: Identifier
    request_id: Identifier
    process_id: ProcessId
    expected_version: ExpectedVersion
    command: Command


class Message(BaseModel):
    """An outbox intent staged by ``send!``.

    ``message_id`` is ``<sender>:<version>:<index>`` (the reference's field name;
    it is the dispatcher's idempotency key).
    """

    model_config = _LENIENT
    message_id: str
    to: str
    body: TaggedValue

    @model_validator(mode="before")
    @classmethod
    def _legacy_id(cls, data: Any) -> Any:
        # Receipts stored before the rename carry ``id``: read both, write ``message_id``.
        if isinstance(data, dict) and "message_id" not in data and "id" in data:
            return {**data, "message_id": data["id"]}
        return data


class DelayedMessage(Message):
    """A delayed outbox intent (a timer), staged by ``send!`` with ``{"delay_ms" N}``.

    ``delay_ms`` is ``N`` (0..``MAX_DELAY_MS``); ``due_ms`` is the host's wall
    clock at the activation (ms since the epoch) plus ``N``: the dispatcher
    delivers the intent no earlier. ``message_id`` is the timer id that
    ``cancel!`` takes.
    """

    delay_ms: Annotated[int, Field(ge=0, le=MAX_DELAY_MS, strict=True)]
    due_ms: Annotated[int, Field(ge=0, strict=True)]


class CancelMessage(BaseModel):
    """A cancel staged by ``cancel!``: ``cancel`` names a pending timer's id.

    ``message_id`` (``<sender>:<version>:<index>``) shares the index counter
    with the intents of the same activation. The dispatcher resolves the
    cancel against the timer; it has no destination and no body.
    """

    model_config = _LENIENT
    message_id: str
    cancel: str


def _staged_kind(entry: Mapping[str, Any]) -> str:
    """``cancel`` when a ``messages`` entry has a ``cancel`` field, else ``delayed``
    when it has ``delay_ms``, else ``send``: how decoding and :func:`wire_message`
    tell the three kinds apart."""
    return "cancel" if "cancel" in entry else "delayed" if "delay_ms" in entry else "send"


def _message_kind(data: Any) -> str:
    if isinstance(data, dict):
        return _staged_kind(data)
    if isinstance(data, CancelMessage):
        return "cancel"
    return "delayed" if isinstance(data, DelayedMessage) else "send"


#: One entry of ``activation.messages``: an intent, a delayed intent or a cancel
#: (told apart by the ``cancel`` and ``delay_ms`` fields).
AnyMessage = Annotated[
    Annotated[Message, Tag("send")]
    | Annotated[DelayedMessage, Tag("delayed")]
    | Annotated[CancelMessage, Tag("cancel")],
    Discriminator(_message_kind),
]


def wire_message(entry: Mapping[str, Any]) -> AnyMessage:
    """The wire model of one ``messages`` entry staged by an activation (plain values).

    An intent (``message_id``, ``to``, ``body``), a timer (also ``delay_ms``,
    ``due_ms``) or a cancel (``message_id``, ``cancel``), told apart as
    :data:`AnyMessage` tells them. Raises ``KeyError`` when the entry lacks a
    field of its kind.
    """
    kind = _staged_kind(entry)
    if kind == "cancel":
        return CancelMessage(message_id=entry["message_id"], cancel=entry["cancel"])
    if kind == "delayed":
        return DelayedMessage(message_id=entry["message_id"], to=entry["to"],
                              body=wire(entry["body"]), delay_ms=entry["delay_ms"],
                              due_ms=entry["due_ms"])
    return Message(message_id=entry["message_id"], to=entry["to"], body=wire(entry["body"]))


class LogRecord(BaseModel):
    """One ``log-info!`` record: ``message`` and a map of tagged ``fields`` (maybe empty)."""

    model_config = _LENIENT
    message: str
    fields: dict[str, TaggedValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _legacy_text(cls, data: Any) -> Any:
        # Receipts stored before records carried plain strings: read them as records.
        return {"message": data, "fields": {}} if isinstance(data, str) else data


class Activation(BaseModel):
    """What a committed activation produced."""

    model_config = _LENIENT
    output: TaggedValue
    logs: list[LogRecord]
    messages: list[AnyMessage]
    version: Version
    root_hash: Hash
    changed: list[str]


class Failure(BaseModel):
    """A stable code and a sanitized message of at most 1024 bytes."""

    model_config = _LENIENT
    code: str
    message: str


class Committed(BaseModel):
    model_config = _LENIENT
    status: Literal["committed"]
    previous_version: Version
    activation: Activation


class Conflict(BaseModel):
    model_config = _LENIENT
    status: Literal["conflict"]
    expected_version: ExpectedVersion
    actual_version: Version
    root_hash: Hash


class Rejected(BaseModel):
    model_config = _LENIENT
    status: Literal["rejected"]
    version: Version
    root_hash: Hash
    failure: Failure


Outcome = Annotated[Committed | Conflict | Rejected, Field(discriminator="status")]


class ControlResponse(BaseModel):
    """The svit-control@1 response envelope."""

    model_config = _LENIENT
    protocol: Literal["svit-control@1"]
    client_id: Identifier
    request_id: Identifier
    process_id: ProcessId
    replayed: bool
    outcome: Outcome


def _decode(model: type[BaseModel], data: Any, what: str) -> Any:
    try:
        raw = (
            strict_json_loads(data, what=what)
            if isinstance(data, bytes | str)
            else data
        )
        return model.model_validate(raw)
    except InvalidInput:
        raise
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(p) for p in err.get("loc", ())) or what
        code = ErrorCode.DECODE_ERROR
        if loc in ("client_id", "request_id"):
            code = ErrorCode.INVALID_CONTROL_ID
        elif loc == "process_id":
            code = ErrorCode.INVALID_PROCESS_ID
        msg = str(err.get("msg", "invalid"))
        if "resource_limit_exceeded" in msg:
            raise LimitExceeded(f"{what} {loc}: {msg}") from None
        raise InvalidInput(f"{what} {loc}: {msg}", code=code) from None
    except RecursionError:
        raise InvalidInput(f"{what} is nested too deeply", code=ErrorCode.DECODE_ERROR) from None


def decode_request(data: Any) -> ControlRequest:
    """Decode one request from JSON bytes/text, or from already-parsed JSON (any type).

    Raises:
        InvalidInput: ``decode_error`` (malformed JSON, wrong types, missing
            fields, unknown protocol or operation, unrepresentable numbers),
            ``invalid_control_id`` (bad client/request id),
            ``invalid_process_id``.
        LimitExceeded: a value bound was exceeded while decoding.
    """
    result: ControlRequest = _decode(ControlRequest, data, "request")
    return result


def decode_response(data: Any) -> ControlResponse:
    """Decode one response; raises like :func:`decode_request`."""
    result: ControlResponse = _decode(ControlResponse, data, "response")
    return result

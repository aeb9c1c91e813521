"""Absolute namespace paths, process ids and script names."""

from __future__ import annotations

import re

from svit_cluster.errors import ErrorCode, InvalidInput

__all__ = [
    "GUEST_WRITABLE_ROOTS",
    "ROOT_KEYS",
    "Path",
    "format_path",
    "is_guest_writable",
    "parse_path",
    "validate_address",
    "validate_process_id",
    "validate_script_name",
]

Path = tuple[str, ...]

#: The root map has exactly these keys (the reference's namespace).
ROOT_KEYS: tuple[str, ...] = (
    "children",
    "inbox",
    "lib",
    "memory",
    "mounts",
    "ports",
    "system",
    "tasks",
    "thread",
)

#: Hosts and guests may write or remove only below these roots.
GUEST_WRITABLE_ROOTS = ("memory", "lib")

_SCRIPT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MAX_PATH_BYTES = 4096
_MAX_PROCESS_ID_BYTES = 256
_MAX_ADDRESS_BYTES = 2048
_EXTERNAL_ADDRESS = re.compile(r"[a-z][a-z0-9+.\-]*://[^\s]+")


def parse_path(path: object) -> Path:
    """Parse an absolute ``/``-separated path into its segments.

    ``"/"`` is the root (``()``). Array children are decimal indexes; whether a
    segment names an index is decided when the path is resolved against a tree.

    Args:
        path: a string such as ``"/memory/items/0"``, at most 4096 bytes.

    Returns:
        The tuple of segments, e.g. ``("memory", "items", "0")``.

    Raises:
        InvalidInput: (``invalid_path``) not a string, not absolute, too long,
            or containing an empty, ``.`` or ``..`` segment.
    """
    if type(path) is not str:
        raise InvalidInput("path must be a string", code=ErrorCode.INVALID_PATH)
    size = _utf8_len(path) if len(path) <= _MAX_PATH_BYTES else _MAX_PATH_BYTES + 1
    if size < 0:
        raise InvalidInput("path is not valid Unicode", code=ErrorCode.INVALID_PATH)
    if size > _MAX_PATH_BYTES:
        raise InvalidInput("path is too long", code=ErrorCode.INVALID_PATH)
    if not path.startswith("/"):
        raise InvalidInput(f"path {path[:64]!r} is not absolute", code=ErrorCode.INVALID_PATH)
    if path == "/":
        return ()
    segments = tuple(path[1:].split("/"))
    for seg in segments:
        if seg in ("", ".", ".."):
            raise InvalidInput(
                f"path {path[:64]!r} has an empty, '.' or '..' segment",
                code=ErrorCode.INVALID_PATH,
            )
    return segments


def _utf8_len(text: str) -> int:
    """UTF-8 length, or -1 for text with a lone surrogate (not encodable)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return -1


def format_path(path: Path) -> str:
    """Inverse of :func:`parse_path`: ``("memory", "x")`` -> ``"/memory/x"``."""
    return "/" + "/".join(path)


def validate_script_name(name: object) -> str:
    """Check a script name: 1-64 bytes of ``[A-Za-z0-9_.-]`` and not ``.``/``..``.

    Raises:
        InvalidInput: (``invalid_script_name``) otherwise.
    """
    if type(name) is not str or not _SCRIPT_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidInput(
            f"invalid script name {str(name)[:80]!r}", code=ErrorCode.INVALID_SCRIPT_NAME
        )
    return name


def is_guest_writable(path: Path) -> bool:
    """True for ``/memory`` and paths below it, and for ``/lib/<name>`` exactly.

    ``/memory`` itself may be written (with a map, as in the reference) but not
    removed; below ``/lib`` only whole scripts are written.
    """
    if len(path) >= 1 and path[0] == "memory":
        return True
    return len(path) == 2 and path[0] == "lib"


def validate_process_id(process_id: object) -> str:
    """Check a process id: ``svit://`` + non-empty rest, no whitespace, <= 256 bytes.

    Raises:
        InvalidInput: (``invalid_process_id``) otherwise.
    """
    if type(process_id) is not str:
        raise InvalidInput("process id must be a string", code=ErrorCode.INVALID_PROCESS_ID)
    if (
        not process_id.startswith("svit://")
        or len(process_id) == len("svit://")
        or len(process_id) > _MAX_PROCESS_ID_BYTES
        or not 0 <= _utf8_len(process_id) <= _MAX_PROCESS_ID_BYTES
        # No whitespace, no control or separator character. Every whitespace
        # character but the ASCII space is non-printable (str.isprintable), so
        # one C-level scan plus the space test is the same rule as a per-character
        # isspace/isprintable loop (tests/values check every code point).
        or not process_id.isprintable() or " " in process_id
    ):
        raise InvalidInput(
            f"invalid process id {process_id[:80]!r}: need svit://<rest>, no whitespace, "
            f"at most {_MAX_PROCESS_ID_BYTES} bytes",
            code=ErrorCode.INVALID_PROCESS_ID,
        )
    return process_id


def validate_address(address: object) -> str:
    """Check a ``send!`` destination: a process id, or an external URI for the dispatcher.

    The reference parses every address as a process id. This host also routes
    outbox intents to external sinks (``http(s)://``, ``redis-stream://``; see
    ``svit_cluster.dispatch``), so an address is either a valid ``svit://`` process
    id or ``<scheme>://<rest>`` with a lower-case scheme other than ``svit``, no
    whitespace or control characters, at most 2048 bytes. Whether a sink exists
    for the scheme is the dispatcher's decision (unknown: dead-lettered).

    Raises:
        InvalidInput: (``invalid_process_id``) a ``svit`` address that is not a
            process id, or anything that is not an address at all.
    """
    if type(address) is str and address.startswith("svit:"):
        return validate_process_id(address)
    if (
        type(address) is not str
        or len(address) > _MAX_ADDRESS_BYTES
        or not 0 <= _utf8_len(address) <= _MAX_ADDRESS_BYTES
        or not _EXTERNAL_ADDRESS.fullmatch(address)
        or not address.isprintable()
    ):
        raise InvalidInput(
            f"invalid address {str(address)[:80]!r}: need a svit:// process id or "
            "<scheme>://<destination>",
            code=ErrorCode.INVALID_PROCESS_ID,
        )
    return address

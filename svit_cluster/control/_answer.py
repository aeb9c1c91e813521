"""What a host answers for one control request, encoded once.

The owner encodes its :class:`~svit_cluster.control.ControlResponse` to JSON
bytes once; those bytes travel to the gateway (over Ray or the direct
transport) and are written to the client unchanged. The outcome status, the
rejection code and the answering owner's fencing token ride along as typed
metadata, so nobody between the owner and the client decodes the response
again: the response is decoded once and encoded once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from svit_cluster.control._wire import ControlResponse, decode_response

__all__ = ["ControlAnswer"]


@dataclass(frozen=True, slots=True)
class ControlAnswer:
    """One answered control request.

    Attributes:
        body: the response document, svit-control@1 JSON bytes
            (``reference/control-protocol.md``), exactly as the client gets it.
        status: its ``outcome.status``: ``"committed"``, ``"conflict"`` or
            ``"rejected"``.
        code: ``outcome.failure.code`` when rejected, else None.
        token: the answering owner's fencing token (the gateway's
            ``X-Svit-Token`` header), None when the router has no owner token
            (in-process hosting).
        host: the host that answered, None when unknown.
    """

    body: bytes
    status: str
    code: str | None = None
    token: int | None = None
    host: str | None = None

    # Pickled as a plain tuple (the owner's answer crosses Ray on every request
    # not sent over the direct transport): the generated slots-dataclass state
    # functions cost several times more. ``body`` is pickled as is, not copied.
    def __getstate__(self) -> tuple[bytes, str, str | None, int | None, str | None]:
        return (self.body, self.status, self.code, self.token, self.host)

    def __setstate__(self, state: tuple[bytes, str, str | None, int | None, str | None]
                     ) -> None:
        body, status, code, token, host = state
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "token", token)
        object.__setattr__(self, "host", host)

    @classmethod
    def of(cls, response: ControlResponse, *, token: int | None = None,
           host: str | None = None) -> ControlAnswer:
        """Encode ``response`` (the only encode on the path)."""
        outcome = response.outcome
        code = outcome.failure.code if outcome.status == "rejected" else None
        return cls(response.model_dump_json().encode(), outcome.status, code, token, host)

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> ControlAnswer:
        """From a result map ``{"response": bytes, "status", "code", "token",
        "host"}`` (a direct-transport answer's meta with its payload as
        ``"response"``).

        A result without ``status`` (an actor of an older release, during a
        rolling upgrade) is decoded once to find it.

        Raises:
            KeyError: no ``"response"``.
            InvalidInput: a result without ``status`` whose response does not decode.
        """
        body: bytes = result["response"]
        token = result.get("token")
        token = int(token) if isinstance(token, int) and not isinstance(token, bool) else None
        host = result.get("host")
        host = str(host) if host is not None else None
        status = result.get("status")
        if not isinstance(status, str):
            return cls.of(decode_response(body), token=token, host=host)
        code = result.get("code")
        return cls(body, status, str(code) if code is not None else None, token, host)

    def to_result(self) -> dict[str, Any]:
        """The inverse of :meth:`from_result`."""
        return {"response": self.body, "status": self.status, "code": self.code,
                "token": self.token, "host": self.host}

    def response(self) -> ControlResponse:
        """Decode :attr:`body` (for callers that need the model: tests, tools).

        Raises:
            InvalidInput: the body does not decode.
        """
        return decode_response(self.body)

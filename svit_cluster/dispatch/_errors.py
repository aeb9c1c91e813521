"""Delivery errors, sorted by whether a retry can help (STYLE.md §5).

Both keep the project's error root (:class:`~svit_cluster.errors.SvitError`)
and carry ``fields["reason"]``, a short stable word used as the dead-letter
reason and as a metrics label.
"""

from __future__ import annotations

from svit_cluster.errors import InvalidInput, UnavailableError

__all__ = ["PermanentDeliveryError", "RetryableDeliveryError"]


class RetryableDeliveryError(UnavailableError):
    """The sink did not confirm (timeout, transport error, 5xx, 429, garbage reply).

    The intent may or may not have arrived; retrying with the same key is
    safe. After ``max_attempts`` it is dead-lettered with reason ``exhausted``.
    """


class PermanentDeliveryError(InvalidInput):
    """The intent can never be delivered as it is; it is dead-lettered at once.

    Raised for an unknown address scheme, a host or stream name outside the
    allowlist, an oversized body, a malformed intent, or a sink that refused
    it (HTTP 4xx other than 404/408/409/425/429, or a redirect). Nothing was
    delivered (redirects are never followed).
    """

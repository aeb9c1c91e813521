"""The fence epoch: the high part of every fencing token (recovery from an etcd restore).

A fencing token is ``epoch << EPOCH_SHIFT | revision``: ``revision`` is the
create revision of the ownership record, ``epoch`` is the cluster's fence epoch
when the record was created (stored in the record's value, so a token never
changes while its record lives). The epoch lives in etcd under
``/svit/<cluster>/fence-epoch`` (a decimal string; absent means 0, so records
and fences written before epochs existed keep their tokens).

Why: etcd revisions only grow -- until etcd is restored from a backup, when
they go back to the backup's revision (etcd 3.4 cannot bump the revision on
restore; described in etcd-io/etcd#16028). New tokens would then fall below the
fences that Redis already holds and every claim would be fenced. Raising the
epoch past the highest fence seen makes every later token larger than every
fence again, in one step (:func:`raise_epoch`).

Bounds (tokens must stay exact in Redis Lua, whose numbers are doubles, exact
up to ``2**53``; the store compares tokens with ``tonumber``):

* ``EPOCH_SHIFT = 40``: revisions up to ``2**40 - 1`` (about 1.1e12 etcd
  writes; at 1000 writes/s that is 34 years). A larger revision is refused.
* epochs up to ``2**13 - 1 = 8191``: each restore raises it by one or a few.

So every token is below ``2**53`` and compares exactly as a Lua number, as a
Python ``int`` and in the chaos checker; tokens of one epoch keep the old
order (epoch 0 tokens equal the create revision).
"""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import ConfigurationError, ConflictError, InvalidInput, UnavailableError
from svit_cluster.ownership._etcd import etcd_call
from svit_cluster.ownership._keys import epoch_key

__all__ = [
    "EPOCH_SHIFT",
    "MAX_EPOCH",
    "MAX_REVISION",
    "epoch_past",
    "fencing_token",
    "raise_epoch",
    "read_epoch",
    "split_token",
]

#: Bits of the token that hold the etcd create revision.
EPOCH_SHIFT = 40
#: Largest create revision a token can carry.
MAX_REVISION = (1 << EPOCH_SHIFT) - 1
#: Largest epoch: keeps every token below 2**53 (exact as a Lua number).
MAX_EPOCH = (1 << (53 - EPOCH_SHIFT)) - 1


def fencing_token(epoch: int, revision: int) -> int:
    """``epoch << EPOCH_SHIFT | revision``.

    Raises:
        ConfigurationError: ``revision`` above :data:`MAX_REVISION` or ``epoch``
            above :data:`MAX_EPOCH` (the token would not be exact in Lua).
        InvalidInput: a negative part.
    """
    if epoch < 0 or revision < 0:
        raise InvalidInput(f"epoch and revision must be >= 0, got {epoch}, {revision}")
    if revision > MAX_REVISION:
        raise ConfigurationError(
            f"etcd revision {revision} exceeds {MAX_REVISION}, the largest a fencing "
            "token can carry (svit_cluster.ownership._epoch)")
    if epoch > MAX_EPOCH:
        raise ConfigurationError(f"fence epoch {epoch} exceeds {MAX_EPOCH}")
    return epoch << EPOCH_SHIFT | revision


def split_token(token: int) -> tuple[int, int]:
    """``(epoch, revision)`` of a token."""
    return token >> EPOCH_SHIFT, token & MAX_REVISION


def epoch_past(fence: int) -> int:
    """The smallest epoch whose every token is larger than ``fence``."""
    return split_token(fence)[0] + 1


def _parse(kv: Any) -> int:
    raw = bytes(kv.value)
    if not raw.isdigit():
        raise ConfigurationError(f"fence epoch key holds {raw[:32]!r}, not a decimal integer")
    return int(raw)


async def read_epoch(client: Any, cluster: str, *, timeout_s: float) -> int:
    """The cluster's current fence epoch (0 when never raised).

    Raises:
        UnavailableError: etcd failed.
        ConfigurationError: the stored value is not a decimal integer.
    """
    got = await etcd_call("get_epoch", client.get(epoch_key(cluster)), timeout_s=timeout_s)
    return 0 if got is None else _parse(got)


async def raise_epoch(client: Any, cluster: str, *, at_least: int, timeout_s: float,
                      guard: tuple[bytes, int] | None = None, attempts: int = 8) -> int:
    """Raise the fence epoch to ``max(current + 1, at_least)``, or keep it if already
    ``>= at_least``; a compare-and-set transaction, so concurrent raises never lower it.

    Args:
        client: an ``aetcd.Client``.
        cluster: cluster name.
        at_least: the epoch wanted (for example :func:`epoch_past` of a fence).
        timeout_s: deadline of each etcd request, in seconds.
        guard: ``(key, create_revision)``: raise only while that ownership record
            still exists with that create revision (the caller still owns it).
        attempts: compare-and-set rounds before giving up (default 8).

    Returns:
        The epoch now stored (``>= at_least``).

    Raises:
        ConflictError: the ``guard`` record is gone or was re-created (field ``key``).
        ConfigurationError: ``at_least`` above :data:`MAX_EPOCH`, or a bad stored value.
        UnavailableError: etcd failed, or the epoch kept changing under us.
    """
    if at_least > MAX_EPOCH:
        raise ConfigurationError(f"fence epoch {at_least} would exceed {MAX_EPOCH}")
    key = epoch_key(cluster)
    tx = client.transactions
    current = await read_epoch(client, cluster, timeout_s=timeout_s)
    for _ in range(attempts):
        if current >= at_least:
            return current
        target = max(current + 1, at_least)
        compare = [tx.version(key) == 0] if current == 0 else [
            tx.value(key) == str(current).encode()]
        if guard is not None:
            compare.append(tx.create(guard[0]) == guard[1])
        ok, responses = await etcd_call(
            "raise_epoch",
            client.transaction(
                compare=compare,
                success=[tx.put(key, str(target).encode())],
                failure=[tx.get(key)] + ([tx.get(guard[0])] if guard is not None else []),
            ),
            timeout_s=timeout_s,
            outcome="unknown",
        )
        if ok:
            return target
        found = responses[0]
        current = _parse(found[0][1]) if found else 0
        if guard is not None:
            record = responses[1]
            if not record or int(record[0][1].create_revision) != guard[1]:
                raise ConflictError("ownership changed while raising the fence epoch",
                                    key=guard[0].decode())
    raise UnavailableError("the fence epoch kept changing; retry", op="raise_epoch")

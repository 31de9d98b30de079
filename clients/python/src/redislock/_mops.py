"""A multi-lock's operations beyond acquire and release, without I/O: ``info()``, ``locked()``,
``owned()``, ``extend()`` and ``reacquire()`` as flows (``_flow``), for the sync and the asyncio
front ends alike. They are ``Lock``'s, key by key:

- ``info()``: ``LOCK.INFO`` of each key, by name (None for a key that holds no lock).
- ``locked()``: any key is held by anyone (a plain string under a name counts, as for ``Lock``).
- ``owned()``: every key still has this hold — the token among its holders, with the grant's
  fence; asked of the server (False without asking once the lease clock ran out).
- ``extend(additional_time, replace_ttl=False)``: every key to one new time to live: the least
  time any key has left plus ``additional_time`` (or ``additional_time`` itself), so that the set
  keeps one lease; zero or less releases every key, as the key's expiry does for redis-py's Lock.
- ``reacquire()``: every key back to ``timeout``.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Sequence

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

from ._common import LockInfo, holder_ttl, lock_error, parse_info, wrong_type
from ._flow import Flow, Send, unwrap
from ._multi import MultiHold, MultiSpec, Name, error_of, extension, label

__all__ = ["info_all", "locked_any", "owned_all", "extend_all", "reacquire_all"]


def info_all(names: Sequence[Name]) -> Flow[Dict[Name, Optional[LockInfo]]]:
    """``LOCK.INFO`` of every key, by name as given."""
    found: Dict[Name, Optional[LockInfo]] = {}
    for name in names:
        try:
            found[name] = parse_info((yield Send(["LOCK.INFO", name])))
        except ResponseError as err:
            raise error_of(err, names, "info") from err
    return found


def locked_any(names: Sequence[Name]) -> Flow[bool]:
    """Any key held by anyone."""
    for name in names:
        try:
            if parse_info((yield Send(["LOCK.INFO", name]))) is not None:
                return True
        except ResponseError as err:
            if wrong_type(err):
                return True
            raise error_of(err, names, "locked") from err
    return False


def owned_all(hold: Optional[MultiHold]) -> Flow[bool]:
    """Every key has ``hold``: its token among the holders, with its fence."""
    if hold is None or hold.left() == 0.0:
        return False
    for name, fence in zip(hold.names, hold.fences):
        try:
            found = parse_info((yield Send(["LOCK.INFO", name])))
        except ResponseError as err:
            if wrong_type(err):
                return False
            raise error_of(err, hold.names, "owned") from err
        entry = None if found is None else found.holder(hold.token)
        if entry is None or int(entry.get("fence", fence)) != fence:
            return False
    return True


def _usable(spec: MultiSpec, hold: Optional[MultiHold], timeout_given: bool, what: str) -> MultiHold:
    if hold is None:
        raise lock_error(LockError, f"Cannot {what} an unlocked lock", label(spec.names))
    if not timeout_given:
        raise lock_error(LockError, f"Cannot {what} a lock with no timeout", label(spec.names))
    return hold


def extend_all(
    spec: MultiSpec,
    hold: Optional[MultiHold],
    timeout_given: bool,
    additional_time: float,
    replace_ttl: bool,
    forget: Callable[[], None],
) -> Flow[bool]:
    """See the module. True once every key was extended; ``LockNotOwnedError`` when a key is no
    longer held (the keys still held keep their lease). ``forget``: the hold ends here (no more
    renewals), when the new time to live is zero or less."""
    held = _usable(spec, hold, timeout_given, "extend")
    add_ms = int(additional_time * 1000)
    if replace_ttl:
        ttl_ms = add_ms
    else:
        found = yield from info_all(held.names)
        left = [None if f is None else holder_ttl(f, held.token) for f in found.values()]
        if any(ms is None or ms < 0 for ms in left):
            raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", label(held.names))
        ttl_ms = min(ms for ms in left if ms is not None) + add_ms
    if ttl_ms <= 0:
        try:
            released = yield Send(["LOCK.RELEASEALL", len(held.names), *held.names, held.token], own=held.bound)
        except ResponseError as err:
            raise error_of(err, held.names, "extend") from err
        forget()
        held.lease_end = 0.0
        if int(unwrap(released) or 0) != len(held.names):
            raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", label(held.names))
        return True
    yield from _extend_to(held, ttl_ms, "extend")
    return True


def reacquire_all(spec: MultiSpec, hold: Optional[MultiHold], timeout_given: bool) -> Flow[bool]:
    """Every key back to the full time to live: True; ``LockNotOwnedError`` when a key is gone."""
    held = _usable(spec, hold, timeout_given, "reacquire")
    yield from _extend_to(held, spec.ttl_ms, "reacquire")
    return True


def _extend_to(hold: MultiHold, ttl_ms: int, what: str) -> Flow[None]:
    """Every key's ``LOCK.EXTEND`` to ``ttl_ms``, in turn; the set's lease clock moves only once
    every key answered 1 (and was acknowledged, with ``replicas=``)."""
    sent = time.monotonic()
    until = sent + max(hold.left(), 1.0)
    for name in hold.names:
        try:
            reply = yield extension(name, hold.token, ttl_ms, until, hold.durable, hold.bound)
        except ResponseError as err:
            raise error_of(err, hold.names, what) from err
        if unwrap(reply) != 1:
            raise lock_error(LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", label(hold.names))
        if hold.durable is not None:
            acks = hold.durable.acks(reply)
            if not acks.ok:
                raise hold.durable.shortfall(acks, label(hold.names), "extension")
    hold.extended(sent, ttl_ms)

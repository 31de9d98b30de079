"""The lock's decisions, without I/O: one core for the sync and the asyncio lock.

Each operation of a lock (acquire, release, extend, …) is a *flow*: a generator that yields the
requests it needs carried out — ``Send`` (one command) or ``Pause`` (a pause) — receives each
reply (or has the error thrown into it) and returns the operation's result. The flows decide
everything: the command lines, the reply → outcome mapping, when a wait is sent again, which
errors become lock errors, the lease clock. The front ends (``redislock.lock``,
``redislock.asyncio``) only carry the requests out, the sync one with blocking calls, the asyncio
one with ``await``; ``drive`` and ``adrive`` (in ``_flow``, with the requests) are the two loops
that do it. What a lock made with ``replicas=`` or ``aof_*=`` asks after a grant or a renewal,
and what the answers mean, is decided in ``_durable``.

A hold and the lease clock (``Hold``, ``Schedule``) are in ``_lease``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MovedError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from ._common import (
    EncodableT,
    LockInfo,
    StaleFenceError,
    UnsupportedError,
    acquire_args,
    as_bytes,
    holder_ttl,
    lock_error,
    parse_grant,
    parse_info,
    renew_at_once,
    translate,
    unsupported,
    wrong_type,
)
from ._durable import Durability, check, confirm
from ._flow import Flow, Pause, Request, Send, adrive, drive, unwrap
from ._lease import Hold


# --- errors -----------------------------------------------------------------------------------

#: Errors that say the key is moving between Cluster nodes, or that the cluster is changing:
#: a wait that meets one is sent again (the client routes it to the node now serving the key).
REDIRECTS = (TryAgainError, AskError, MovedError, ClusterDownError, ClusterError)


def call_error(err: ResponseError, name: Any, what: str) -> Exception:
    """The error of a guarded command (``call``, ``FenceGate.call``): only ``NOTOWNER`` and
    ``STALEFENCE`` are the lock's; the inner command's errors (``WRONGTYPE``, an unknown
    command, …) stay the driver's own, as if the command had been sent directly. A server
    without the guarded command itself answers ``UnsupportedError``."""
    text = str(err)
    if text.startswith(("NOTOWNER", "STALEFENCE")):
        return translate(err, name, what)
    if unsupported(err) and ("lock.call" in text.lower() or "lock.fence" in text.lower()):
        return translate(err, name, what)
    return err


def loss_message(gone: bool, closed: bool = False) -> str:
    """The log line's reason for a loss."""
    if closed:
        return "the connection it was bound to closed"
    if gone:
        return "a renewal found it held by no one or another"
    return "no renewal was answered before its lease ran out"


# --- the lock's operations --------------------------------------------------------------------


class Local(Protocol):
    token: Optional[bytes]
    fence: Optional[int]
    hold: Optional[Hold]


class Spec:
    """What a lock was made with: name, lease, mode, renewal."""

    def __init__(
        self,
        name: Any,
        ttl_ms: int,
        mode: Sequence[EncodableT],
        auto_renew: bool,
        ephemeral: bool,
        timeout_given: bool,
        durable: Optional[Durability] = None,
    ) -> None:
        self.name = name
        self.ttl_ms = ttl_ms
        self.mode = list(mode)
        self.auto_renew = auto_renew
        self.ephemeral = ephemeral
        self.timeout_given = timeout_given
        self.durable = durable


#: How much earlier than its deadline a wait may come back empty before it counts as cut short
#: (by a read bound shorter than the wait) and is sent again with the time left.
CUT_SHORT = 0.02


def acquire(
    spec: Spec, token: bytes, wait_ms: Optional[int], pause: float
) -> Flow[Optional[Tuple[bytes, int, float]]]:
    """Take the lock: (token, fence, moment the lease clock starts) once granted, None if not.

    ``wait_ms``: None, do not wait; 0, wait without limit; else wait that long in the server.
    Re-queue rules: a wait whose connection dropped is sent once more with the time left (at
    the back of the queue); one that meets a Cluster redirect or a cluster change is sent again
    while time is left (the client routes it to the node serving the key now); one that comes
    back empty early (cut short by a read bound) goes on with the time left. A key of another
    type is polled every ``pause`` seconds, as redis-py polls its own lock.

    With ``spec.durable``, every grant is followed by WAIT/WAITAOF on the connection that
    received it; one not acknowledged in time is released, and ``NotReplicatedError``
    raised."""
    durable = spec.durable
    if durable is not None and not durable.checked:
        yield from check(durable, spec.name)
    follow = None if durable is None else durable.follow(spec.ttl_ms / 1000)
    deadline = None if not wait_ms else time.monotonic() + wait_ms / 1000
    requeued = False
    while True:
        args = acquire_args(spec.name, token, spec.ttl_ms, spec.mode, None)
        if deadline is not None and deadline <= time.monotonic():
            return None
        sent = time.monotonic()
        try:
            if wait_ms is None:
                reply = yield Send(args, own=spec.ephemeral, follow=follow)
            elif deadline is None:  # BLOCK 0: waits without limit, and so does its read
                reply = yield Send(
                    [*args, "BLOCK", 0], idempotent=False, forever=True, own=spec.ephemeral, follow=follow
                )
            else:
                reply = yield Send(args, idempotent=False, wait_until=deadline, own=spec.ephemeral, follow=follow)
            grant = parse_grant(unwrap(reply))
        except ResponseError as err:
            if wait_ms is not None and isinstance(err, REDIRECTS):
                yield from _settle(deadline)
                continue
            if not wrong_type(err):
                raise translate(err, spec.name, "acquire") from err
            # A plain string (redis-py's own Lock, say): not granted, as redis-py's SET NX would
            # say; a blocking acquire polls until it is gone or the wait is over.
            if wait_ms is None:
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            yield Pause(pause if left is None else min(pause, left))
            continue
        except ClusterError:
            if wait_ms is None:
                raise
            yield from _settle(deadline)
            continue
        except ConnectionError as err:
            if wait_ms is None or requeued or isinstance(err, TimeoutError):
                raise
            requeued = True
            continue
        if grant is None:
            # A wait answered empty before its end was cut short by a read bound shorter than
            # the wait (a wait without limit is never answered empty otherwise): wait on.
            if wait_ms == 0 or (deadline is not None and deadline - time.monotonic() > CUT_SHORT):
                continue
            return None
        if durable is not None:
            yield from confirm(durable, spec.name, grant[0], reply)
        if wait_ms is not None and renew_at_once(sent, time.monotonic(), spec.ttl_ms):
            # Granted after a wait: the lease began at the grant, some time after the request
            # was sent; renew now so that the lease clock starts from a known moment.
            renew_sent = time.monotonic()
            try:
                renewal = yield Send(
                    ["LOCK.EXTEND", spec.name, grant[0], "PX", spec.ttl_ms],
                    bound=spec.ttl_ms / 1000,
                    own=spec.ephemeral,
                    follow=follow,
                )
            except (ConnectionError, OSError, ResponseError):
                renewal = None  # unknown: the lease clock counts from the wait's request
            renewed = unwrap(renewal)
            if renewed == 1:
                if durable is None or durable.acks(renewal).ok:
                    sent = renew_sent  # else not acknowledged: it does not count
            elif renewed is not None:
                continue  # gone already (a lease shorter than the round trip): wait on
        return grant[0], grant[1], sent


def _settle(deadline: Optional[float]) -> Flow[None]:
    """A short pause before a wait is sent again after a redirect the client could not follow
    yet (the cluster is changing): never past the wait's deadline."""
    pause = 0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic()))
    if pause > 0:
        yield Pause(pause)


def info(name: Any) -> Flow[Optional[LockInfo]]:
    return parse_info((yield Send(["LOCK.INFO", name])))


def locked(name: Any) -> Flow[bool]:
    """Held by anyone (a plain string under the name counts, as for redis-py's Lock)."""
    try:
        return (yield from info(name)) is not None
    except ResponseError as err:
        if wrong_type(err):
            return True
        raise


def owned(name: Any, local: Local) -> Flow[bool]:
    """Held with this token; False without asking once the lease clock ran out."""
    token, hold = local.token, local.hold
    if token is None or (hold is not None and hold.left() == 0.0):
        return False
    try:
        found = yield from info(name)
    except ResponseError as err:
        if wrong_type(err):
            return False
        raise
    return found is not None and token in found.tokens


def bound(local: Local) -> bool:
    """The current hold is bound to a connection: its requests go on that connection."""
    return local.hold is not None and local.hold.bound


def release(name: Any, local: Local, forget: Callable[[], None]) -> Flow[None]:
    """LOCK.RELEASE, bounded by the lease left (at least 1 s). The token is forgotten once the
    server has answered: a release that timed out (or was cancelled) can be tried again."""
    token = local.token
    if token is None:
        raise lock_error(LockError, "Cannot release a lock that's not owned or is already unlocked.", name)
    hold = local.hold
    # Signalled lost (its lease clock ran out): whatever the server still has is freed, and
    # the release says the hold was lost, as the with-block does.
    lost = hold is not None and hold.left() == 0.0
    forget()
    left = max(hold.left() if hold is not None else 0.0, 1.0)
    try:
        released = yield Send(["LOCK.RELEASE", name, token], bound=left, own=bound(local))
    except ResponseError as err:
        local.token = None
        raise translate(err, name, "release") from err
    local.token = None
    if not released or lost:
        raise lock_error(LockNotOwnedError, "Cannot release a lock that's no longer owned", name)


def extend(
    spec: Spec, local: Local, additional_time: float, replace_ttl: bool, forget: Callable[[], None]
) -> Flow[bool]:
    """Adds ``additional_time`` seconds (or sets the time left to it); a result of zero or
    less ends the hold, as the key's expiry does for redis-py's Lock."""
    token = local.token
    if token is None:
        raise lock_error(LockError, "Cannot extend an unlocked lock", spec.name)
    if not spec.timeout_given:
        raise lock_error(LockError, "Cannot extend a lock with no timeout", spec.name)
    add_ms = int(additional_time * 1000)
    if replace_ttl:
        ttl_ms = add_ms
    else:
        try:
            found = yield from info(spec.name)
        except ResponseError as err:
            raise translate(err, spec.name, "extend") from err
        remaining = holder_ttl(found, token) if found is not None else None
        if remaining is None or remaining < 0:
            raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", spec.name)
        ttl_ms = remaining + add_ms
    if ttl_ms <= 0:
        try:
            ended = yield Send(["LOCK.RELEASE", spec.name, token], own=bound(local))
        except ResponseError as err:
            raise translate(err, spec.name, "extend") from err
        if not ended:
            raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", spec.name)
        forget()
        if local.hold is not None:
            local.hold.lease_end = 0.0
        return True
    yield from extend_to(spec.name, local, ttl_ms, "extend", spec.durable)
    return True


def reacquire(spec: Spec, local: Local) -> Flow[bool]:
    if local.token is None:
        raise lock_error(LockError, "Cannot reacquire an unlocked lock", spec.name)
    if not spec.timeout_given:
        raise lock_error(LockError, "Cannot reacquire a lock with no timeout", spec.name)
    yield from extend_to(spec.name, local, spec.ttl_ms, "reacquire", spec.durable)
    return True


def extend_to(name: Any, local: Local, ttl_ms: int, what: str, durable: Optional[Durability] = None) -> Flow[None]:
    """LOCK.EXTEND to ``ttl_ms``; with ``durable``, an extension not acknowledged in time raises
    ``NotReplicatedError`` and leaves the lease clock where it was (the hold is kept)."""
    token = local.token
    sent = time.monotonic()
    follow = None if durable is None else durable.follow(ttl_ms / 1000)
    try:
        reply = yield Send(["LOCK.EXTEND", name, token, "PX", ttl_ms], own=bound(local), follow=follow)
    except ResponseError as err:
        raise translate(err, name, what) from err
    if not unwrap(reply):
        raise lock_error(LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", name)
    if durable is not None:
        acks = durable.acks(reply)
        if not acks.ok:
            raise durable.shortfall(acks, name, "extension")
    if local.hold is not None:
        local.hold.extended(sent, ttl_ms)


Shape = Callable[[Sequence[EncodableT], Any], Any]


def as_sent(command: Sequence[EncodableT], reply: Any) -> Any:
    return reply


def call(name: Any, local: Local, command: Sequence[EncodableT], shape: Shape = as_sent) -> Flow[Any]:
    """LOCK.CALL: the inner command's reply (``shape``: as the driver gives it for the command
    sent directly) or error; sent once."""
    token = local.token
    if token is None:
        raise lock_error(LockError, "Cannot call through an unlocked lock", name)
    if not command:
        raise ValueError("call() needs a command")
    try:
        return shape(command, (yield Send(["LOCK.CALL", name, token, *command], idempotent=False)))
    except ResponseError as err:
        failed = err
    if wrong_type(failed):
        # The inner command's, or the lock's key holds another type now (a plain SET over
        # it): then the hold is gone, as redis-py's Lock says of an overwritten key.
        try:
            yield Send(["LOCK.INFO", name])
        except ResponseError as err:
            if wrong_type(err):
                raise translate(err, name, "call") from failed
    raise call_error(failed, name, "call") from failed


def fence_call(gate: Any, fence: Any, command: Sequence[EncodableT], shape: Shape = as_sent) -> Flow[Any]:
    """LOCK.FENCE: the inner command's reply or error as the driver gives it, or
    ``StaleFenceError``."""
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise TypeError(
            f"fence must be the integer fence of a hold (lock.fence), not {fence!r}: "
            "is the lock held?"
        )
    if not command:
        raise ValueError("call() needs a command")
    try:
        return shape(command, (yield Send(["LOCK.FENCE", gate, fence, *command], idempotent=False)))
    except ResponseError as err:
        raise call_error(err, gate, "fence") from err


def encode_token(token: Any, encoder: Any) -> bytes:
    if encoder is not None:
        return as_bytes(encoder.encode(token))
    return as_bytes(token)


__all__ = [
    "Send",
    "Pause",
    "Request",
    "Flow",
    "drive",
    "adrive",
    "Spec",
    "StaleFenceError",
    "UnsupportedError",
]

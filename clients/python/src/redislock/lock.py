"""The lock, for redis-py's synchronous clients (``redis.Redis``, ``redis.RedisCluster``)."""

from __future__ import annotations

import logging
import os
import threading
import time
from types import SimpleNamespace, TracebackType
from typing import Any, Callable, List, Optional, Type, Union

from redis.exceptions import ConnectionError, LockError, LockNotOwnedError, ResponseError, TimeoutError

from ._common import (
    DEFAULT_LEASE,
    EncodableT,
    LockInfo,
    Number,
    UnsupportedError,
    acquire_args,
    as_bytes,
    block_ms,
    holder_ttl,
    lease_end,
    lock_error,
    mode_args,
    new_token,
    parse_grant,
    parse_info,
    renew_at_once,
    to_ms,
    translate,
    unsupported,
    wrong_type,
)
from ._link import WAIT_GRACE, bounded, call_on_client, link_for

logger = logging.getLogger("redislock")

__all__ = ["Lock", "FenceGate"]


class _Watchdog(threading.Thread):
    """Renews one hold every third of its lease on the lock's own connections, until stopped.

    The loss follows the lease clock, not the replies: the hold's conservative local lease end
    (``hold.lease_end``) moves only when a renewal is answered, each renewal may take at most the
    lease time left, and when that time is up the loss is reported at once, whether or not an
    answer ever comes. A renewal answered 0 (the hold is gone) reports the loss as well."""

    def __init__(self, lock: "Lock", hold: "_Hold", sent: float) -> None:
        super().__init__(name=f"redislock-renew-{lock.name!r}", daemon=True)
        self.lock = lock
        self.hold = hold
        self.last_sent = sent
        self.halt = threading.Event()

    def run(self) -> None:
        lock = self.lock
        period = lock._ttl_ms / 3000
        # After a failed renewal: soon again, but not in a tight loop.
        pause = min(max(lock._ttl_ms / 20000, 0.01), 0.25)
        hold = self.hold
        next_try = self.last_sent + period
        while True:
            if self.halt.wait(max(0.0, min(next_try, hold.lease_end) - time.monotonic())):
                return
            sent = time.monotonic()
            if sent >= hold.lease_end:
                self._lost()
                return
            try:
                renewed = lock._send(
                    ["LOCK.EXTEND", lock.name, hold.token, "PX", lock._ttl_ms],
                    hold.lease_end - sent,
                )
            except ResponseError as err:
                if wrong_type(err):  # overwritten by another type: the hold is gone
                    renewed = 0
                else:  # READONLY during a failover, say: try again while the lease runs
                    next_try = time.monotonic() + pause
                    continue
            except (ConnectionError, TimeoutError, OSError):
                next_try = time.monotonic() + pause
                continue
            if self.halt.is_set():
                return
            if renewed != 1:
                self._lost(gone=True)
                return
            hold.lease_end = lease_end(sent, lock._ttl_ms)
            next_try = sent + period

    def _lost(self, gone: bool = False) -> None:
        if not self.halt.is_set():
            self.lock._report_lost(self.hold, gone)

    def stop(self) -> None:
        # No join: a renewal in flight may wait for a partitioned server until the lease ends,
        # and the halt alone keeps it from reporting anything. An EXTEND that lands after the
        # release finds the token holding nothing and changes nothing.
        self.halt.set()


class _LeaseEvent(threading.Event):
    """``lock.lost``: set by the renewals when the hold is lost; in a forked child, where no
    renewal runs, set by the lease clock alone."""

    def __init__(self, lock: "Lock") -> None:
        super().__init__()
        self._lock = lock

    def is_set(self) -> bool:
        return super().is_set() or self._lock._orphan_lease_over()

    def wait(self, timeout: Optional[float] = None) -> bool:
        left = self._lock._orphan_lease_left()
        if left is not None and (timeout is None or left < timeout):
            super().wait(left)
            return self.is_set()
        return super().wait(timeout)


class _Hold:
    """One grant: its token and fence, the conservative local end of its lease
    (``time.monotonic()``), the process that took it (a forked child has the hold but not its
    renewals) and its renewals. Shared by the owner's thread and the renewal thread."""

    __slots__ = ("token", "fence", "lease_end", "pid", "watchdog")

    def __init__(self, token: bytes, fence: int, ends: float) -> None:
        self.token = token
        self.fence = fence
        self.lease_end = ends
        self.pid = os.getpid()
        self.watchdog: Optional[_Watchdog] = None

    def left(self) -> float:
        return max(0.0, self.lease_end - time.monotonic())


class _Local(threading.local):
    """Per-thread state of a lock; the class attributes are every thread's defaults."""

    token: Optional[bytes] = None
    fence: Optional[int] = None
    hold: Optional[_Hold] = None


def _new_local(thread_local: bool) -> Any:
    if thread_local:
        return _Local()
    return SimpleNamespace(token=None, fence=None, hold=None)


class Lock:
    """A lock served by the redislock module, with redis-py ``Lock``'s interface.

    ``Lock(redis, name, timeout=None, sleep=0.1, blocking=True, blocking_timeout=None,
    thread_local=True, raise_on_release_error=True)`` takes redis-py's arguments, so
    ``r.lock(name, ..., lock_class=redislock.Lock)`` works. Waiting happens in the server;
    ``sleep`` is the pause between tries only while the key holds a plain string (a lock of
    redis-py's own, during a migration).

    - ``timeout``: the lock's time to live in seconds. ``None`` or 0 (the default) means held
      until released: the lock gets a lease of ``lease`` seconds that a background thread renews.
    - ``auto_renew``: renew the lease every third of the TTL until release; always on without
      ``timeout``.
    - ``on_lost``: called with the lock, from the renewal thread, when the hold is lost: a
      renewal found it gone, or no renewal was answered before the lease's conservative local
      end (before the server can grant the lock to anyone else). ``lost`` (a
      ``threading.Event``) is set at the same moment; ``release()`` works inside the callback.
    - ``shared``: a read hold of a read/write lock (LOCK.ACQUIRE … SHARED): any number of
      shared holders at once, or one exclusive holder, never both.
    - ``limit``: one of ``limit`` places of a semaphore (LOCK.ACQUIRE … LIMIT n); every lock on
      the key must give the same ``limit``.
    - ``ephemeral``: the hold ends when the connection that asked for it closes (EPHEMERAL).

    Acquire, release, extend and the renewals go through connections of the lock's own (same
    settings as the client's, no retries), each bounded in time: a wait reads for as long as it
    waits, whatever the client's ``socket_timeout``; see docs/clients.md for what happens under
    each network fault. Each grant has its own token, fence and lease, whatever the kind. A
    request that does not fit the key raises ``LockKindError``; on a server without these
    options they raise ``UnsupportedError``.
    """

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        auto_renew: Optional[bool] = None,
        lease: Number = DEFAULT_LEASE,
        on_lost: Optional[Callable[["Lock"], Any]] = None,
        shared: bool = False,
        limit: Optional[int] = None,
        ephemeral: bool = False,
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        if not timeout:  # None or 0: redis-py's "no expiry"
            if auto_renew is False:
                raise ValueError("a lock without timeout is renewed automatically: give a timeout")
            self._ttl_ms = to_ms(lease, "lease")
            self.auto_renew = True
        else:
            self._ttl_ms = to_ms(timeout, "timeout")
            self.auto_renew = bool(auto_renew)
        self.on_lost = on_lost
        self._mode: List[EncodableT] = mode_args(shared, limit, ephemeral)
        self.shared = bool(shared)
        self.limit = limit
        self.ephemeral = bool(ephemeral)
        self.local: Any = _new_local(self.thread_local)
        #: Set when the hold is lost (see ``on_lost``); cleared by the next grant.
        self.lost = _LeaseEvent(self)

    def __repr__(self) -> str:
        return f"<redislock.Lock name={self.name!r} fence={self.fence!r}>"

    # -- redis-py's interface -----------------------------------------------------------------

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise lock_error(LockError, "Unable to acquire lock within the time specified", self.name)

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockError:
            if exc_type is None and self.raise_on_release_error:
                raise
            # Never hide the block's own exception behind the release's.
            logger.warning("Lock %r was no longer owned when exiting context manager.", self.name)

    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[EncodableT] = None,
    ) -> bool:
        """Take the lock: True once granted. Waits in the server (LOCK.ACQUIRE … BLOCK) unless
        ``blocking`` is false, at most ``blocking_timeout`` seconds (None: without limit).

        The wait is sent once; if its connection drops, it is sent again once, with the time
        left (at the back of the queue). A wait never outlives ``blocking_timeout`` by more than
        the network's round trip: with no answer by then, ``redis.exceptions.TimeoutError``."""
        token_bytes = new_token() if token is None else self._encode(token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        pause = self.sleep if sleep is None else sleep
        wait_ms = block_ms(blocking, blocking_timeout)
        deadline = None if not wait_ms else time.monotonic() + wait_ms / 1000
        requeued = False
        while True:
            args = acquire_args(self.name, token_bytes, self._ttl_ms, self._mode, None)
            if deadline is not None and deadline <= time.monotonic():
                return False
            sent = time.monotonic()
            try:
                if wait_ms is None:
                    reply = self._send(args, self._link_timeout(), idempotent=True)
                elif deadline is None:  # BLOCK 0: waits without limit, and so does its read
                    reply = self._send([*args, "BLOCK", 0], None, idempotent=False)
                else:
                    reply = self._send(args, None, idempotent=False, wait_until=deadline)
                grant = parse_grant(reply)
            except ResponseError as err:
                if not wrong_type(err):
                    raise translate(err, self.name, "acquire") from err
                # A plain string (redis-py's own Lock, say): not granted, as redis-py's SET NX
                # would say; a blocking acquire polls until it is gone or the wait is over.
                if wait_ms is None:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                time.sleep(pause if left is None else min(pause, left))  # polling a foreign key
                continue
            except ConnectionError as err:
                # The wait's connection dropped (killed, server restarted): once, with the time
                # left, at the back of the queue; never past the caller's timeout.
                if wait_ms is None or requeued or isinstance(err, TimeoutError):
                    raise
                requeued = True
                continue
            if grant is None:
                return False
            if wait_ms is not None and renew_at_once(sent, time.monotonic(), self._ttl_ms):
                # Granted after a wait: the lease began at the grant, some time after the request
                # was sent; renew now so that the local lease clock starts from a known moment.
                renew_sent = time.monotonic()
                try:
                    renewed = self._send(
                        ["LOCK.EXTEND", self.name, grant[0], "PX", self._ttl_ms],
                        self._link_timeout(self._ttl_ms / 1000),
                    )
                except (ConnectionError, OSError, ResponseError):
                    renewed = None  # unknown: the lease clock counts from the wait's request
                if renewed == 1:
                    sent = renew_sent
                elif renewed is not None:
                    continue  # gone already (a lease shorter than the round trip): wait on
            self._granted(grant[0], grant[1], sent)
            return True

    def locked(self) -> bool:
        """True if the lock is held by anyone (a plain string under the name counts, as it
        does for redis-py's Lock)."""
        try:
            return self.info() is not None
        except ResponseError as err:
            if wrong_type(err):
                return True
            raise

    def owned(self) -> bool:
        """True if the lock is held with this lock's token. False once the hold's local lease
        clock has run out, without asking the server (in a forked child as well)."""
        token = self.local.token
        hold = self.local.hold
        if token is None or (hold is not None and hold.left() == 0.0):
            return False
        try:
            info = self.info()
        except ResponseError as err:
            if wrong_type(err):
                return False
            raise
        return info is not None and token in info.tokens

    def release(self) -> None:
        """Give the lock back; ``LockNotOwnedError`` if it was no longer held. Bounded in time:
        at most the lease time left (at least 1 s), and never more than the client's
        ``socket_timeout``; then ``redis.exceptions.TimeoutError``, and the token is kept, so
        that a later ``release()`` can try again."""
        token = self.local.token
        if token is None:
            raise lock_error(
                LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name
            )
        self._stop_watchdog()
        hold = self.local.hold
        left = max(hold.left() if hold is not None else 0.0, 1.0)
        try:
            released = self._send(["LOCK.RELEASE", self.name, token], self._link_timeout(left))
        except ResponseError as err:
            self.local.token = None
            raise translate(err, self.name, "release") from err
        self.local.token = None
        if not released:
            raise lock_error(LockNotOwnedError, "Cannot release a lock that's no longer owned", self.name)

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining time (or, with ``replace_ttl``, set
        the remaining time to it). A result of zero or less ends the hold, as the key's expiry
        does for redis-py's Lock. With ``auto_renew``, the next renewal sets it back to the
        lock's timeout."""
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot extend an unlocked lock", self.name)
        if self.timeout is None:
            raise lock_error(LockError, "Cannot extend a lock with no timeout", self.name)
        add_ms = int(additional_time * 1000)
        if replace_ttl:
            ttl_ms = add_ms
        else:
            try:
                info = self.info()
            except ResponseError as err:
                raise translate(err, self.name, "extend") from err
            remaining = holder_ttl(info, token) if info is not None else None
            if remaining is None or remaining < 0:
                raise lock_error(
                    LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name
                )
            ttl_ms = remaining + add_ms
        if ttl_ms <= 0:
            self._end_hold(token, "extend")
            return True
        self._extend_to(token, ttl_ms, "extend")
        return True

    def reacquire(self) -> bool:
        """Reset the remaining time to the lock's timeout."""
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot reacquire an unlocked lock", self.name)
        if self.timeout is None:
            raise lock_error(LockError, "Cannot reacquire a lock with no timeout", self.name)
        self._extend_to(token, self._ttl_ms, "reacquire")
        return True

    # -- more than redis-py -------------------------------------------------------------------

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the current grant (None when not held)."""
        return self.local.fence if self.local.token is not None else None

    @property
    def token(self) -> Optional[bytes]:
        """The owner token of the current grant (None when not held)."""
        return self.local.token

    @property
    def lease_left(self) -> float:
        """Seconds left on the hold's conservative local lease clock (0 when not held)."""
        hold = self.local.hold
        if self.local.token is None or hold is None:
            return 0.0
        return hold.left()

    def info(self) -> Optional[LockInfo]:
        """LOCK.INFO: mode, ttl (ms), waiters, holders (and token, fence of an exclusive lock;
        limit of a semaphore); None when nobody holds the lock."""
        return parse_info(self._send(["LOCK.INFO", self.name], self._link_timeout()))

    def call(self, *command: EncodableT) -> Any:
        """Run ``command`` atomically if this lock's token still holds it (LOCK.CALL); its reply
        as is. ``LockNotOwnedError`` if the hold is gone. Sent once, never retried: a command
        whose answer was lost may have run."""
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot call through an unlocked lock", self.name)
        if not command:
            raise ValueError("call() needs a command")
        try:
            return self._send(
                ["LOCK.CALL", self.name, token, *command], self._link_timeout(), idempotent=False
            )
        except ResponseError as err:
            raise translate(err, self.name, "call") from err

    # -- internals ----------------------------------------------------------------------------

    def _encode(self, value: EncodableT) -> bytes:
        get_encoder = getattr(self.redis, "get_encoder", None)
        if get_encoder is not None:
            return as_bytes(get_encoder().encode(value))
        return as_bytes(value)

    def _link(self) -> Any:
        return link_for(self.redis, self.name)

    def _link_timeout(self, *more: Optional[float]) -> Optional[float]:
        """The client's ``socket_timeout``, or a tighter bound given."""
        link = self._link()
        return bounded(link.default_timeout if link is not None else None, *more)

    def _send(
        self,
        args: List[Any],
        timeout: Optional[float],
        idempotent: bool = True,
        wait_until: Optional[float] = None,
    ) -> Any:
        """One command on the lock's own connections, bounded by ``timeout`` (a wait: by
        ``wait_until``, see ``Link.call``); through the client itself where its pool cannot be
        copied (Sentinel, a custom pool)."""
        link = self._link()
        if link is None or (self.ephemeral and args[0] == "LOCK.ACQUIRE"):
            if wait_until is not None:
                left_ms = int((wait_until - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return None
                args = [*args, "BLOCK", left_ms]
                timeout = left_ms / 1000 + WAIT_GRACE
            if link is None:
                return self.redis.execute_command(*args)
            # The hold is bound to the connection that asks for it: the application's own.
            return call_on_client(self.redis, args, timeout)
        return link.call(args, timeout, idempotent, wait_until)

    def _granted(self, token: bytes, fence: int, sent: float) -> None:
        self._stop_watchdog()
        local = self.local
        hold = _Hold(token, fence, lease_end(sent, self._ttl_ms))
        local.token, local.fence, local.hold = token, fence, hold
        self.lost.clear()
        if self.auto_renew:
            link = self._link()
            if link is not None:
                link.keep_spare()
            hold.watchdog = _Watchdog(self, hold, sent)
            hold.watchdog.start()

    def _stop_watchdog(self) -> None:
        hold = getattr(self.local, "hold", None)
        if hold is not None and hold.watchdog is not None:
            hold.watchdog.stop()

    def _orphan_lease_left(self) -> Optional[float]:
        """In a forked child holding the lock (no renewals there): the lease time left."""
        hold = self.local.hold
        if self.local.token is None or hold is None or hold.watchdog is None:
            return None
        if hold.pid == os.getpid() or hold.watchdog.halt.is_set():
            return None
        return hold.left()

    def _orphan_lease_over(self) -> bool:
        return self._orphan_lease_left() == 0.0

    def _extend_to(self, token: bytes, ttl_ms: int, what: str) -> None:
        sent = time.monotonic()
        try:
            extended = self._send(
                ["LOCK.EXTEND", self.name, token, "PX", ttl_ms], self._link_timeout()
            )
        except ResponseError as err:
            raise translate(err, self.name, what) from err
        if not extended:
            raise lock_error(
                LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", self.name
            )
        hold = self.local.hold
        if hold is not None:
            hold.lease_end = lease_end(sent, ttl_ms)

    def _end_hold(self, token: bytes, what: str) -> None:
        try:
            ended = self._send(["LOCK.RELEASE", self.name, token], self._link_timeout())
        except ResponseError as err:
            raise translate(err, self.name, what) from err
        if not ended:
            raise lock_error(
                LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", self.name
            )
        self._stop_watchdog()
        if self.local.hold is not None:
            self.local.hold.lease_end = 0.0

    def _report_lost(self, hold: _Hold, gone: bool) -> None:
        if gone:
            logger.warning("Lock %r was lost: a renewal found it held by no one or another", self.name)
        else:
            logger.warning(
                "Lock %r was lost: no renewal was answered before its lease ran out", self.name
            )
        hold.lease_end = min(hold.lease_end, time.monotonic())
        # The renewal thread's own view of the hold, so that on_lost may call release().
        local = self.local
        if local.token is None:
            local.token, local.fence, local.hold = hold.token, hold.fence, hold
        self.lost.set()
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:  # a callback's bug must not kill the renewal thread silently
                logger.exception("on_lost callback of lock %r failed", self.name)


class FenceGate:
    """A gate key that runs commands only for fences at least as new as any it has accepted
    (LOCK.FENCE): for resources on another shard, or written without holding the lock."""

    def __init__(self, redis: Any, gate: Union[str, bytes]) -> None:
        self.redis = redis
        self.gate = gate

    def call(self, fence: int, *command: EncodableT) -> Any:
        """Run ``command`` if ``fence`` ≥ the gate's highest; ``StaleFenceError`` otherwise."""
        if not command:
            raise ValueError("call() needs a command")
        try:
            return self.redis.execute_command("LOCK.FENCE", self.gate, int(fence), *command)
        except ResponseError as err:
            raise translate(err, self.gate, "fence") from err


def supports(redis: Any, command: str) -> bool:
    """True if the server knows ``command`` (a LOCK.* command of a newer redislock, say).

    It sends the command with no arguments: a server that knows it answers with its arity
    error, one that does not with an unknown-command error; nothing is changed either way."""
    try:
        redis.execute_command(command)
    except ResponseError as err:
        return not unsupported(err)
    return True


__all__ += ["supports", "UnsupportedError"]

"""The lock, for redis-py's synchronous clients (``redis.Redis``, ``redis.RedisCluster``)."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace, TracebackType
from typing import Any, Callable, List, Optional, Tuple, Type, Union

import redis as redis_py
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
    lock_error,
    mode_args,
    new_token,
    parse_grant,
    parse_info,
    to_ms,
    translate,
    unsupported,
)

logger = logging.getLogger("redislock")

__all__ = ["Lock", "FenceGate"]


def _own_client(client: Any) -> Tuple[Any, Optional[Callable[[], None]]]:
    """A client with a connection pool of its own for the renewals, so that they never queue
    behind the application's commands; the client itself where its pool cannot be copied
    (Cluster, Sentinel)."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(client, redis_py.Redis) and type(pool) in (
        redis_py.ConnectionPool,
        redis_py.BlockingConnectionPool,
    ):
        own = redis_py.ConnectionPool(
            connection_class=pool.connection_class, max_connections=2, **pool.connection_kwargs
        )
        return redis_py.Redis(connection_pool=own), own.disconnect
    return client, None


class _Watchdog(threading.Thread):
    """Renews one hold every third of its TTL until stopped; stops for good, and reports the
    loss, the first time a renewal finds the hold gone (or cannot reach the server before the
    lease ends)."""

    def __init__(self, lock: "Lock", token: bytes, granted_at: float) -> None:
        super().__init__(name=f"redislock-renew-{lock.name!r}", daemon=True)
        self.lock = lock
        self.token = token
        self.deadline = granted_at + lock._ttl_ms / 1000
        self.halt = threading.Event()

    def run(self) -> None:
        lock = self.lock
        client, close = _own_client(lock.redis)
        interval = lock._ttl_ms / 3000
        try:
            while not self.halt.wait(interval):
                sent = time.monotonic()
                try:
                    renewed = client.execute_command(
                        "LOCK.EXTEND", lock.name, self.token, "PX", lock._ttl_ms
                    )
                except (ConnectionError, TimeoutError, OSError, ResponseError) as err:
                    # Not reachable (or a replica now): try again until the lease is over.
                    if time.monotonic() >= self.deadline:
                        if not self.halt.is_set():
                            lock._report_lost(self.token, err)
                        return
                    continue
                if self.halt.is_set():
                    return
                if renewed == 1:
                    self.deadline = sent + lock._ttl_ms / 1000
                else:
                    lock._report_lost(self.token, None)
                    return
        finally:
            if close is not None:
                close()

    def stop(self) -> None:
        self.halt.set()
        if threading.current_thread() is not self:
            self.join()


class _Local(threading.local):
    """Per-thread state of a lock; the class attributes are every thread's defaults."""

    token: Optional[bytes] = None
    fence: Optional[int] = None
    watchdog: Optional[_Watchdog] = None


class Lock:
    """A lock served by the redislock module, with redis-py ``Lock``'s interface.

    ``Lock(redis, name, timeout=None, sleep=0.1, blocking=True, blocking_timeout=None,
    thread_local=True, raise_on_release_error=True)`` takes redis-py's arguments, so
    ``r.lock(name, ..., lock_class=redislock.Lock)`` works; ``sleep`` is accepted and unused
    (waiting happens in the server).

    - ``timeout``: the lock's time to live in seconds. ``None`` (the default) means held until
      released: the lock gets a lease of ``lease`` seconds that a background thread renews.
    - ``auto_renew``: renew the lease every third of the TTL until release; always on without
      ``timeout``.
    - ``on_lost``: called with the lock, from the renewal thread, when a renewal finds the hold
      gone; ``lost`` (a ``threading.Event``) is set at the same moment.
    - ``shared``: a read hold of a read/write lock (LOCK.ACQUIRE … SHARED): any number of
      shared holders at once, or one exclusive holder, never both.
    - ``limit``: one of ``limit`` places of a semaphore (LOCK.ACQUIRE … LIMIT n); every lock on
      the key must give the same ``limit``.
    - ``ephemeral``: the hold ends when the connection that asked for it closes (EPHEMERAL).

    Each grant has its own token, fence and lease, whatever the kind; ``release``, ``extend``,
    ``owned`` and ``call`` act on this lock's own hold. A request that does not fit the key (a
    semaphore with another ``limit``, ``limit`` on a read/write lock, the same token in the
    other mode) raises ``LockKindError``. On a server without these options they raise
    ``UnsupportedError``.
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
        if timeout is None:
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
        self.local: Any = (
            _Local() if self.thread_local else SimpleNamespace(token=None, fence=None, watchdog=None)
        )
        #: Set when a renewal finds the hold gone; cleared by the next grant.
        self.lost = threading.Event()

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
        ``blocking`` is false, at most ``blocking_timeout`` seconds (None: without limit)."""
        if token is None:
            token_bytes = new_token()
        else:
            token_bytes = self._encode(token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        args = acquire_args(
            self.name, token_bytes, self._ttl_ms, self._mode, block_ms(blocking, blocking_timeout)
        )
        started = time.monotonic()
        try:
            grant = parse_grant(self.redis.execute_command(*args))
        except ResponseError as err:
            raise translate(err, self.name, "acquire") from err
        if grant is None:
            return False
        self._granted(grant[0], grant[1], started)
        return True

    def locked(self) -> bool:
        """True if the lock is held by anyone."""
        return self.info() is not None

    def owned(self) -> bool:
        """True if the lock is held with this lock's token."""
        token = self.local.token
        if token is None:
            return False
        info = self.info()
        return info is not None and token in info.tokens

    def release(self) -> None:
        """Give the lock back; ``LockNotOwnedError`` if it was no longer held."""
        token = self.local.token
        if token is None:
            raise lock_error(
                LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name
            )
        self.local.token = None
        self._stop_watchdog()
        try:
            released = self.redis.execute_command("LOCK.RELEASE", self.name, token)
        except ResponseError as err:
            raise translate(err, self.name, "release") from err
        if not released:
            raise lock_error(LockNotOwnedError, "Cannot release a lock that's no longer owned", self.name)

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining time (or, with ``replace_ttl``, set
        the remaining time to it). With ``auto_renew``, the next renewal sets it back to the
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
            info = self.info()
            remaining = holder_ttl(info, token) if info is not None else None
            if remaining is None or remaining < 0:
                raise lock_error(
                    LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name
                )
            ttl_ms = remaining + add_ms
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

    def info(self) -> Optional[LockInfo]:
        """LOCK.INFO: mode, ttl (ms), waiters, holders (and token, fence of an exclusive lock;
        limit of a semaphore); None when nobody holds the lock."""
        return parse_info(self.redis.execute_command("LOCK.INFO", self.name))

    def call(self, *command: EncodableT) -> Any:
        """Run ``command`` atomically if this lock's token still holds it (LOCK.CALL); its reply
        as is. ``LockNotOwnedError`` if the hold is gone."""
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot call through an unlocked lock", self.name)
        if not command:
            raise ValueError("call() needs a command")
        try:
            return self.redis.execute_command("LOCK.CALL", self.name, token, *command)
        except ResponseError as err:
            raise translate(err, self.name, "call") from err

    # -- internals ----------------------------------------------------------------------------

    def _encode(self, value: EncodableT) -> bytes:
        get_encoder = getattr(self.redis, "get_encoder", None)
        if get_encoder is not None:
            return as_bytes(get_encoder().encode(value))
        return as_bytes(value)

    def _granted(self, token: bytes, fence: int, started: float) -> None:
        self._stop_watchdog()
        self.local.token = token
        self.local.fence = fence
        self.lost.clear()
        if self.auto_renew:
            watchdog = _Watchdog(self, token, started)
            self.local.watchdog = watchdog
            watchdog.start()

    def _stop_watchdog(self) -> None:
        watchdog = getattr(self.local, "watchdog", None)
        self.local.watchdog = None
        if watchdog is not None:
            watchdog.stop()

    def _extend_to(self, token: bytes, ttl_ms: int, what: str) -> None:
        try:
            extended = self.redis.execute_command("LOCK.EXTEND", self.name, token, "PX", ttl_ms)
        except ResponseError as err:
            raise translate(err, self.name, what) from err
        if not extended:
            raise lock_error(
                LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", self.name
            )

    def _report_lost(self, token: bytes, error: Optional[BaseException]) -> None:
        if error is None:
            logger.warning("Lock %r was lost: a renewal found it held by no one or another", self.name)
        else:
            logger.warning("Lock %r was lost: no renewal reached the server in time (%s)", self.name, error)
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

"""The lock for ``redis.asyncio`` clients: the same interface as ``redislock.Lock``, awaited.

``lost`` is an ``asyncio.Event``; ``on_lost`` may be a plain function or a coroutine function.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from types import SimpleNamespace, TracebackType
from typing import Any, Awaitable, Callable, List, Optional, Type, Union

from redis.exceptions import ConnectionError, LockError, LockNotOwnedError, ResponseError, TimeoutError

from ._common import (
    DEFAULT_LEASE,
    EncodableT,
    LockInfo,
    LockKindError,
    Number,
    StaleFenceError,
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
    wrong_type,
)
from ._link import WAIT_GRACE, async_call_on_client, async_link_for, bounded

logger = logging.getLogger("redislock")

__all__ = [
    "Lock",
    "FenceGate",
    "LockError",
    "LockNotOwnedError",
    "UnsupportedError",
    "StaleFenceError",
    "LockKindError",
]


class Lock:
    """``redislock.Lock`` for ``redis.asyncio.Redis`` / ``RedisCluster``: ``await lock.acquire()``,
    ``async with r.lock(name, lock_class=redislock.asyncio.Lock)``, and so on. The renewals run
    as a task on the running event loop."""

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
        on_lost: Optional[Callable[["Lock"], Union[Any, Awaitable[Any]]]] = None,
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
        # Tasks share one thread: the token lives on the lock, as in redis.asyncio's own Lock.
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
        self.local: Any = SimpleNamespace(token=None, fence=None)
        #: The conservative local end of the hold's lease (time.monotonic()).
        self._lease_end = 0.0
        self._renewal: Optional["asyncio.Task[None]"] = None
        self.lost = asyncio.Event()

    def __repr__(self) -> str:
        return f"<redislock.asyncio.Lock name={self.name!r} fence={self.fence!r}>"

    async def __aenter__(self) -> "Lock":
        if await self.acquire():
            return self
        raise lock_error(LockError, "Unable to acquire lock within the time specified", self.name)

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            if exc_type is None and self.raise_on_release_error:
                raise
            logger.warning("Lock %r was no longer owned when exiting context manager.", self.name)

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[EncodableT] = None,
    ) -> bool:
        """As ``redislock.Lock.acquire``. Cancelling it ends the wait: its connection is closed,
        which takes the waiter out of the server's queue."""
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
                    reply = await self._send(args, self._link_timeout(), idempotent=True)
                elif deadline is None:
                    reply = await self._send([*args, "BLOCK", 0], None, idempotent=False)
                else:
                    reply = await self._send(args, None, idempotent=False, wait_until=deadline)
                grant = parse_grant(reply)
            except ResponseError as err:
                if not wrong_type(err):
                    raise translate(err, self.name, "acquire") from err
                if wait_ms is None:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                await asyncio.sleep(pause if left is None else min(pause, left))  # a foreign key
                continue
            except ConnectionError as err:
                if wait_ms is None or requeued or isinstance(err, TimeoutError):
                    raise
                requeued = True
                continue
            if grant is None:
                return False
            if wait_ms is not None and renew_at_once(sent, time.monotonic(), self._ttl_ms):
                renew_sent = time.monotonic()
                try:
                    renewed = await self._send(
                        ["LOCK.EXTEND", self.name, grant[0], "PX", self._ttl_ms],
                        self._link_timeout(self._ttl_ms / 1000),
                    )
                except (ConnectionError, OSError, ResponseError):
                    renewed = None
                if renewed == 1:
                    sent = renew_sent
                elif renewed is not None:
                    continue
            self._stop_renewal()
            self.local.token, self.local.fence = grant
            self._lease_end = lease_end(sent, self._ttl_ms)
            self.lost.clear()
            if self.auto_renew:
                self._renewal = asyncio.ensure_future(self._renew(grant[0], sent))
            return True

    async def locked(self) -> bool:
        try:
            return await self.info() is not None
        except ResponseError as err:
            if wrong_type(err):
                return True
            raise

    async def owned(self) -> bool:
        token = self.local.token
        if token is None or time.monotonic() >= self._lease_end:
            return False
        try:
            info = await self.info()
        except ResponseError as err:
            if wrong_type(err):
                return False
            raise
        return info is not None and token in info.tokens

    async def release(self) -> None:
        """As ``redislock.Lock.release``. The token is forgotten only once the server has
        answered: a release that is cancelled or times out can be tried again."""
        token = self.local.token
        if token is None:
            raise lock_error(
                LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name
            )
        self._stop_renewal()
        left = max(self._lease_end - time.monotonic(), 1.0)
        try:
            released = await self._send(["LOCK.RELEASE", self.name, token], self._link_timeout(left))
        except ResponseError as err:
            self.local.token = None
            raise translate(err, self.name, "release") from err
        self.local.token = None
        if not released:
            raise lock_error(LockNotOwnedError, "Cannot release a lock that's no longer owned", self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
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
                info = await self.info()
            except ResponseError as err:
                raise translate(err, self.name, "extend") from err
            remaining = holder_ttl(info, token) if info is not None else None
            if remaining is None or remaining < 0:
                raise lock_error(
                    LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name
                )
            ttl_ms = remaining + add_ms
        if ttl_ms <= 0:  # ends the hold, as the key's expiry does for redis-py's Lock
            await self._end_hold(token)
            return True
        await self._extend_to(token, ttl_ms, "extend")
        return True

    async def reacquire(self) -> bool:
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot reacquire an unlocked lock", self.name)
        if self.timeout is None:
            raise lock_error(LockError, "Cannot reacquire a lock with no timeout", self.name)
        await self._extend_to(token, self._ttl_ms, "reacquire")
        return True

    @property
    def fence(self) -> Optional[int]:
        return self.local.fence if self.local.token is not None else None

    @property
    def token(self) -> Optional[bytes]:
        return self.local.token

    async def info(self) -> Optional[LockInfo]:
        return parse_info(await self._send(["LOCK.INFO", self.name], self._link_timeout()))

    async def call(self, *command: EncodableT) -> Any:
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot call through an unlocked lock", self.name)
        if not command:
            raise ValueError("call() needs a command")
        try:
            return await self._send(
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

    def _link_timeout(self, *more: Optional[float]) -> Optional[float]:
        link = async_link_for(self.redis, self.name)
        return bounded(link.default_timeout if link is not None else None, *more)

    async def _send(
        self,
        args: List[Any],
        timeout: Optional[float],
        idempotent: bool = True,
        wait_until: Optional[float] = None,
    ) -> Any:
        """One command on the lock's own connections, bounded by ``timeout`` or ``wait_until``
        (see ``redislock.Lock._send``)."""
        link = async_link_for(self.redis, self.name)
        if link is None or (self.ephemeral and args[0] == "LOCK.ACQUIRE"):
            if wait_until is not None:
                left_ms = int((wait_until - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return None
                args = [*args, "BLOCK", left_ms]
                timeout = left_ms / 1000 + WAIT_GRACE
            if link is None:
                return await self.redis.execute_command(*args)
            return await async_call_on_client(self.redis, args, timeout)
        return await link.call(args, timeout, idempotent, wait_until)

    async def _extend_to(self, token: bytes, ttl_ms: int, what: str) -> None:
        sent = time.monotonic()
        try:
            extended = await self._send(
                ["LOCK.EXTEND", self.name, token, "PX", ttl_ms], self._link_timeout()
            )
        except ResponseError as err:
            raise translate(err, self.name, what) from err
        if not extended:
            raise lock_error(
                LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", self.name
            )
        self._lease_end = lease_end(sent, ttl_ms)

    async def _end_hold(self, token: bytes) -> None:
        try:
            ended = await self._send(["LOCK.RELEASE", self.name, token], self._link_timeout())
        except ResponseError as err:
            raise translate(err, self.name, "extend") from err
        if not ended:
            raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name)
        self._stop_renewal()
        self._lease_end = 0.0

    def _stop_renewal(self) -> None:
        # Cancelled, not awaited: a renewal in flight may wait for a partitioned server until the
        # lease ends, and awaiting it would also swallow a cancellation of the caller's own.
        task, self._renewal = self._renewal, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _renew(self, token: bytes, sent: float) -> None:
        """Renews every third of the lease on the lock's own connections; the loss follows the
        lease clock (see ``redislock.lock._Watchdog``)."""
        period = self._ttl_ms / 3000
        pause = min(max(self._ttl_ms / 20000, 0.01), 0.25)
        next_try = sent + period
        while True:
            # The renewal schedule and the lease clock: moments, not waits for an event.
            await asyncio.sleep(max(0.0, min(next_try, self._lease_end) - time.monotonic()))
            sent = time.monotonic()
            if sent >= self._lease_end:
                await self._report_lost(None)
                return
            try:
                renewed = await self._send(
                    ["LOCK.EXTEND", self.name, token, "PX", self._ttl_ms], self._lease_end - sent
                )
            except ResponseError as err:
                if not wrong_type(err):
                    next_try = time.monotonic() + pause
                    continue
                renewed = 0
            except (ConnectionError, TimeoutError, OSError):
                next_try = time.monotonic() + pause
                continue
            if renewed != 1:
                await self._report_lost(None)
                return
            self._lease_end = lease_end(sent, self._ttl_ms)
            next_try = sent + period

    async def _report_lost(self, error: Optional[BaseException]) -> None:
        logger.warning("Lock %r was lost (%s)", self.name, error or "no renewal kept its lease")
        self._lease_end = min(self._lease_end, time.monotonic())
        self._renewal = None  # this task ends here; release() has nothing to stop
        self.lost.set()
        if self.on_lost is not None:
            try:
                result = self.on_lost(self)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("on_lost callback of lock %r failed", self.name)


class FenceGate:
    """``redislock.FenceGate`` for ``redis.asyncio`` clients."""

    def __init__(self, redis: Any, gate: Union[str, bytes]) -> None:
        self.redis = redis
        self.gate = gate

    async def call(self, fence: int, *command: EncodableT) -> Any:
        if not command:
            raise ValueError("call() needs a command")
        try:
            return await self.redis.execute_command("LOCK.FENCE", self.gate, int(fence), *command)
        except ResponseError as err:
            raise translate(err, self.gate, "fence") from err

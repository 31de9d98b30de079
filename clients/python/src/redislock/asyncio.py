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
    lock_error,
    mode_args,
    new_token,
    parse_grant,
    parse_info,
    to_ms,
    translate,
)

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
        self.local: Any = SimpleNamespace(token=None, fence=None)
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
        token_bytes = new_token() if token is None else self._encode(token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        args = acquire_args(
            self.name, token_bytes, self._ttl_ms, self._mode, block_ms(blocking, blocking_timeout)
        )
        started = time.monotonic()
        try:
            grant = parse_grant(await self.redis.execute_command(*args))
        except ResponseError as err:
            raise translate(err, self.name, "acquire") from err
        if grant is None:
            return False
        await self._stop_renewal()
        self.local.token, self.local.fence = grant
        self.lost.clear()
        if self.auto_renew:
            self._renewal = asyncio.ensure_future(self._renew(grant[0], started))
        return True

    async def locked(self) -> bool:
        return await self.info() is not None

    async def owned(self) -> bool:
        token = self.local.token
        if token is None:
            return False
        info = await self.info()
        return info is not None and token in info.tokens

    async def release(self) -> None:
        token = self.local.token
        if token is None:
            raise lock_error(
                LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name
            )
        self.local.token = None
        await self._stop_renewal()
        try:
            released = await self.redis.execute_command("LOCK.RELEASE", self.name, token)
        except ResponseError as err:
            raise translate(err, self.name, "release") from err
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
            info = await self.info()
            remaining = holder_ttl(info, token) if info is not None else None
            if remaining is None or remaining < 0:
                raise lock_error(
                    LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name
                )
            ttl_ms = remaining + add_ms
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
        return parse_info(await self.redis.execute_command("LOCK.INFO", self.name))

    async def call(self, *command: EncodableT) -> Any:
        token = self.local.token
        if token is None:
            raise lock_error(LockError, "Cannot call through an unlocked lock", self.name)
        if not command:
            raise ValueError("call() needs a command")
        try:
            return await self.redis.execute_command("LOCK.CALL", self.name, token, *command)
        except ResponseError as err:
            raise translate(err, self.name, "call") from err

    # -- internals ----------------------------------------------------------------------------

    def _encode(self, value: EncodableT) -> bytes:
        get_encoder = getattr(self.redis, "get_encoder", None)
        if get_encoder is not None:
            return as_bytes(get_encoder().encode(value))
        return as_bytes(value)

    async def _extend_to(self, token: bytes, ttl_ms: int, what: str) -> None:
        try:
            extended = await self.redis.execute_command("LOCK.EXTEND", self.name, token, "PX", ttl_ms)
        except ResponseError as err:
            raise translate(err, self.name, what) from err
        if not extended:
            raise lock_error(
                LockNotOwnedError, f"Cannot {what} a lock that's no longer owned", self.name
            )

    async def _stop_renewal(self) -> None:
        task, self._renewal = self._renewal, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _renew(self, token: bytes, granted_at: float) -> None:
        deadline = granted_at + self._ttl_ms / 1000
        interval = self._ttl_ms / 3000
        while True:
            await asyncio.sleep(interval)  # the renewal period, not a wait for an event
            sent = time.monotonic()
            try:
                renewed = await self.redis.execute_command(
                    "LOCK.EXTEND", self.name, token, "PX", self._ttl_ms
                )
            except (ConnectionError, TimeoutError, OSError, ResponseError) as err:
                if time.monotonic() >= deadline:
                    await self._report_lost(err)
                    return
                continue
            if renewed == 1:
                deadline = sent + self._ttl_ms / 1000
            else:
                await self._report_lost(None)
                return

    async def _report_lost(self, error: Optional[BaseException]) -> None:
        logger.warning("Lock %r was lost (%s)", self.name, error or "a renewal found it gone")
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

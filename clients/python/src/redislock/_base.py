"""What the sync and the asyncio lock share above the core: the arguments, the state of a hold,
and each operation as a flow (see ``_core``); the front ends only carry the flows out."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Generic, List, Optional, Type, TypeVar, Union

from redis.exceptions import LockError, LockNotOwnedError

from . import _core
from ._common import (
    DEFAULT_LEASE,
    EncodableT,
    Number,
    block_ms,
    lock_error,
    mode_args,
    new_token,
    to_ms,
)
from ._core import Flow, Spec
from ._lease import Hold
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._durable import Durability

logger = logging.getLogger("redislock")


C = TypeVar("C")


class LockBase(Generic[C]):
    """The lock without its I/O, for clients of type ``C``. See ``redislock.Lock`` for the
    arguments."""

    #: What a loss is called in the logs and ``__repr__``.
    _kind = "redislock.Lock"

    def __init__(
        self,
        redis: C,
        name: Union[str, bytes, memoryview],
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        auto_renew: Optional[bool] = None,
        lease: Number = DEFAULT_LEASE,
        on_lost: Optional[Callable[[Any], Any]] = None,
        shared: bool = False,
        limit: Optional[int] = None,
        ephemeral: bool = False,
        replicas: int = 0,
        replicas_timeout: Number = DEFAULT_REPLICAS_TIMEOUT,
        aof_local: bool = False,
        aof_replicas: int = 0,
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
            ttl_ms = to_ms(lease, "lease")
            self.auto_renew = True
        else:
            ttl_ms = to_ms(timeout, "timeout")
            self.auto_renew = bool(auto_renew)
        self._ttl_ms = ttl_ms
        self.on_lost = on_lost
        self._mode: List[EncodableT] = mode_args(shared, limit, ephemeral)
        self.shared = bool(shared)
        self.limit = limit
        self.ephemeral = bool(ephemeral)
        durable = Durability.make(replicas, replicas_timeout, aof_local, aof_replicas)
        self.replicas = replicas
        self.replicas_timeout = replicas_timeout
        self.aof_local = bool(aof_local)
        self.aof_replicas = aof_replicas
        self._spec = Spec(
            name, ttl_ms, self._mode, self.auto_renew, self.ephemeral, timeout is not None, durable
        )
        self.local: Any = self._new_local()
        #: Set when the hold is lost (see ``on_lost``); cleared by the next grant.
        self.lost = self._new_lost()

    def _new_local(self) -> Any:
        raise NotImplementedError

    def _new_lost(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self._kind} name={self.name!r} fence={self.fence!r}>"

    # -- the state of the current hold ------------------------------------------------------------

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the current grant (None when not held)."""
        fence: Optional[int] = self.local.fence if self.local.token is not None else None
        return fence

    @property
    def token(self) -> Optional[bytes]:
        """The owner token of the current grant (None when not held)."""
        token: Optional[bytes] = self.local.token
        return token

    @property
    def lease_left(self) -> float:
        """Seconds left on the hold's conservative local lease clock (0 when not held)."""
        hold: Optional[Hold] = self.local.hold
        if self.local.token is None or hold is None:
            return 0.0
        return hold.left()

    def _held(self) -> Optional[Hold]:
        hold: Optional[Hold] = self.local.hold if self.local.token is not None else None
        return hold

    # -- the operations, as flows -----------------------------------------------------------------

    def _acquire(
        self,
        sleep: Optional[Number],
        blocking: Optional[bool],
        blocking_timeout: Optional[Number],
        token: Optional[EncodableT],
    ) -> Flow[bool]:
        encoder = getattr(self.redis, "get_encoder", None)
        token_bytes = new_token() if token is None else _core.encode_token(token, encoder() if encoder else None)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        pause = float(self.sleep if sleep is None else sleep)
        grant = yield from _core.acquire(self._spec, token_bytes, block_ms(blocking, blocking_timeout), pause)
        if grant is None:
            return False
        self._granted(*grant)
        return True

    def _granted(self, token: bytes, fence: int, sent: float) -> None:
        self._forget()
        hold = Hold(
            self.name,
            token,
            fence,
            self._ttl_ms,
            sent,
            self.auto_renew,
            self,
            os.getpid(),
            self._spec.durable,
            self.ephemeral,
        )
        self._bind(hold, getattr(self.local, "hold", None))
        self.local.token, self.local.fence, self.local.hold = token, fence, hold
        self.lost.clear()
        self._schedule(hold)

    def _bind(self, hold: Hold, previous: Optional[Hold]) -> None:
        """A bound hold (EPHEMERAL) takes the connection it was granted on (and a hold it
        replaces gives its own back); the front end's."""

    def _schedule(self, hold: Hold) -> None:
        """Put the hold's lease clock (and renewals) on the front end's schedule."""
        raise NotImplementedError

    def _unschedule(self, hold: Hold) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        """The current hold ends here: no more renewals, no loss to report."""
        hold: Optional[Hold] = getattr(self.local, "hold", None)
        if hold is not None and not hold.ended:
            self._unschedule(hold)

    def _release(self) -> Flow[None]:
        return _core.release(self.name, self.local, self._forget)

    def _extend(self, additional_time: Number, replace_ttl: bool) -> Flow[bool]:
        return _core.extend(self._spec, self.local, additional_time, replace_ttl, self._forget)

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> Flow[None]:
        """The end of a with-block: the release, then ``_exit``."""
        lost = bool(self.lost.is_set())
        try:
            yield from self._release()
        except LockError as err:
            self._exit(exc_type, lost, err)
        else:
            self._exit(exc_type, lost, None)

    def _exit(self, exc_type: Optional[Type[BaseException]], lost: bool, error: Optional[LockError]) -> None:
        """The end of a with-block, once the release was tried: its error (or, if the hold was
        lost during the block, ``LockNotOwnedError``) is raised unless the block raised one of
        its own, which is never hidden."""
        if error is None and lost:
            error = lock_error(
                LockNotOwnedError, "The lock was lost while the with-block held it", self.name
            )  # type: ignore[assignment]
        if error is None:
            return
        if exc_type is None and self.raise_on_release_error:
            raise error
        logger.warning("Lock %r was no longer owned when exiting context manager.", self.name)

    def _not_acquired(self) -> Exception:
        return lock_error(LockError, "Unable to acquire lock within the time specified", self.name)

    def _note_loss(self, hold: Hold) -> bool:
        """The lease clock of ``hold`` ran out or a renewal found it gone: logged, and ``lost``
        set when it is this lock's current hold. True when ``on_lost`` is to be called."""
        logger.warning("Lock %r was lost: %s", self.name, _core.loss_message(hold.gone, hold.closed))
        current = getattr(self.local, "hold", None)
        if current is not None and current is not hold and self.local.token is not None:
            return False  # another hold of the lock (another thread's): not ours to signal
        self.lost.set()
        return self.on_lost is not None


class Held:
    """For type checkers, mixed into the lock a ``with`` block holds: held, so ``fence`` and
    ``token`` are set (at run time the block gets the lock itself)."""

    @property
    def fence(self) -> int:
        raise NotImplementedError

    @property
    def token(self) -> bytes:
        raise NotImplementedError


__all__ = ["LockBase", "Held"]

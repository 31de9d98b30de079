"""What the sync and the asyncio multi-lock share above ``_multi``: the arguments, the state of
the hold, and each operation as a flow; the front ends (``multilock``, ``_amulti``) only carry
the flows out and put the hold on their renewal schedule."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Type, TypeVar

from redis.exceptions import LockError, LockNotOwnedError

from . import _core
from ._base import logger
from ._common import DEFAULT_LEASE, EncodableT, Number, block_ms, lock_error, mode_args, new_token, to_ms
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._durable import Durability
from ._flow import Flow
from ._lease import Hold
from ._common import LockInfo
from ._mops import extend_all, info_all, locked_any, owned_all, reacquire_all
from ._multi import MultiHold, MultiSpec, Name, acquire_all, check_names, cluster_slot, label, release_all

C = TypeVar("C")


class MultiLockBase(Generic[C]):
    """A multi-lock without its I/O, for clients of type ``C``; see ``redislock.MultiLock``."""

    _kind = "redislock.MultiLock"

    def __init__(
        self,
        redis: C,
        names: Sequence[Name],
        timeout: Optional[Number] = None,
        *,
        lease: Number = DEFAULT_LEASE,
        auto_renew: Optional[bool] = None,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
        shared: bool = False,
        ephemeral: bool = False,
        replicas: int = 0,
        replicas_timeout: Number = DEFAULT_REPLICAS_TIMEOUT,
        raise_on_release_error: bool = True,
    ) -> None:
        self.redis = redis
        self.names: List[Name] = check_names(names)
        #: How the set is named in logs and errors.
        self.name = label(self.names)
        slot_of = self._slot_of()
        if slot_of is not None:
            cluster_slot(self.names, slot_of)
        if not timeout:
            if auto_renew is False:
                raise ValueError("a lock without timeout is renewed automatically: give a timeout")
            ttl_ms = to_ms(lease, "lease")
            self.auto_renew = True
        else:
            ttl_ms = to_ms(timeout, "timeout")
            self.auto_renew = bool(auto_renew)
        self.timeout = timeout
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.on_lost = on_lost
        self.shared = bool(shared)
        self.ephemeral = bool(ephemeral)
        self.replicas = replicas
        self.raise_on_release_error = raise_on_release_error
        durable = Durability.make(replicas, replicas_timeout, False, 0)
        mode: List[EncodableT] = mode_args(shared, None, ephemeral)
        self._ttl_ms = ttl_ms
        self._spec = MultiSpec(self.names, ttl_ms, mode, self.auto_renew, self.ephemeral, durable)
        self._token: Optional[bytes] = None
        self._hold: Optional[MultiHold] = None
        #: Set when the hold is lost (see ``on_lost``); cleared by the next grant.
        self.lost = self._new_lost()

    def _slot_of(self) -> Optional[Callable[[bytes], int]]:
        """On a Cluster client: the slot of a key, to check that the names share one."""
        return None

    def _new_lost(self) -> Any:
        raise NotImplementedError

    def _bind(self, hold: MultiHold, previous: Optional[MultiHold]) -> None:
        """As ``LockBase._bind``: the front end's."""

    def _schedule(self, hold: MultiHold) -> None:
        raise NotImplementedError

    def _unschedule(self, hold: MultiHold) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self._kind} names={label(self.names)} fences={self.fences!r}>"

    # -- the state of the hold ----------------------------------------------------------------------

    @property
    def token(self) -> Optional[bytes]:
        """The owner token of the grant, the same on every key (None when not held)."""
        return self._token

    @property
    def fences(self) -> Optional[Dict[Name, int]]:
        """The fencing token of each key of the grant, by name (None when not held)."""
        hold = self._held()
        return None if hold is None else dict(zip(self.names, hold.fences))

    def fence_of(self, name: Name) -> Optional[int]:
        """The fence of one key of the grant, named as given (None when not held);
        ``KeyError`` for a name that is not one of the keys."""
        if name not in self.names:
            raise KeyError(f"{name!r} is not one of {label(self.names)}")
        fences = self.fences
        return None if fences is None else fences[name]

    @property
    def fence_list(self) -> Optional[List[int]]:
        """The fencing token of each key, in the order of ``names`` (None when not held)."""
        hold = self._held()
        return None if hold is None else list(hold.fences)

    @property
    def lease_left(self) -> float:
        """Seconds left on the set's conservative local lease clock (0 when not held)."""
        hold = self._held()
        return 0.0 if hold is None else hold.left()

    def _held(self) -> Optional[MultiHold]:
        return self._hold if self._token is not None else None

    # -- the operations, as flows -------------------------------------------------------------------

    def _acquire(
        self, blocking: Optional[bool], blocking_timeout: Optional[Number], token: Optional[bytes]
    ) -> Flow[bool]:
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        wait = block_ms(blocking, blocking_timeout)
        grant = yield from acquire_all(self._spec, new_token() if token is None else token, wait)
        if grant is None:
            return False
        token_bytes, fences, sent = grant
        self._forget()
        hold = MultiHold(
            self.names,
            token_bytes,
            fences,
            self._ttl_ms,
            sent,
            self.auto_renew,
            self,
            os.getpid(),
            self._spec.durable,
            self.ephemeral,
        )
        self._bind(hold, self._hold)
        self._token, self._hold = token_bytes, hold
        self.lost.clear()
        self._schedule(hold)
        return True

    def _info(self) -> Flow[Dict[Name, Optional[LockInfo]]]:
        return info_all(self.names)

    def _locked(self) -> Flow[bool]:
        return locked_any(self.names)

    def _owned(self) -> Flow[bool]:
        return owned_all(self._held())

    def _extend(self, additional_time: Number, replace_ttl: bool) -> Flow[bool]:
        return extend_all(self._spec, self._held(), bool(self.timeout), additional_time, replace_ttl, self._forget)

    def _reacquire(self) -> Flow[bool]:
        return reacquire_all(self._spec, self._held(), bool(self.timeout))

    def _forget(self) -> None:
        hold = self._hold
        if hold is not None and not hold.ended:
            self._unschedule(hold)

    def _release(self) -> Flow[int]:
        """``LOCK.RELEASEALL``; the token is forgotten once the server has answered (a release
        without an answer can be tried again)."""
        hold = self._held()
        lost = hold is not None and hold.left() == 0.0
        token = self._token
        if token is not None:
            self._forget()
        bound = max(hold.left() if hold is not None else 0.0, 1.0)
        try:
            count = yield from release_all(self.names, token, lost, bound, hold is not None and hold.bound)
        except LockError:
            self._token = None  # answered (not held, or some keys no longer were)
            raise
        self._token = None
        return count

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> Flow[None]:
        """The end of a with-block: the release; its ``LockNotOwnedError`` (or the loss during
        the block) raised unless the block raised an error of its own."""
        lost = bool(self.lost.is_set())
        error: Optional[LockError] = None
        try:
            yield from self._release()
        except LockError as err:
            error = err
        if error is None and lost:
            error = lock_error(LockNotOwnedError, "The lock was lost while the with-block held it", label(self.names))  # type: ignore[assignment]
        if error is None:
            return
        if exc_type is None and self.raise_on_release_error:
            raise error
        logger.warning("Multi-lock %s was no longer owned when exiting context manager.", label(self.names))

    def _not_acquired(self) -> Exception:
        return lock_error(LockError, "Unable to acquire lock within the time specified", label(self.names))

    def _note_loss(self, hold: Hold) -> bool:
        """The set's lease clock ran out, or a renewal found a key gone: logged, ``lost`` set
        (when it is the current hold); True when ``on_lost`` is to be called."""
        logger.warning("Multi-lock %s was lost: %s", label(self.names), _core.loss_message(hold.gone, hold.closed))
        if hold is not self._hold:
            return False
        self.lost.set()
        return self.on_lost is not None


__all__ = ["MultiLockBase"]

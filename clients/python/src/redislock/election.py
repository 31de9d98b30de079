"""Leader election for redis-py's synchronous clients: ``redislock.Election``. The decisions are
``_election``'s; this carries them out with blocking calls, on the lock's machinery (``Lock``:
its connections, its renewal thread, its lease clock)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Optional, Union, overload

import redis as redis_py

from ._common import Number
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._election import DEFAULT_LEASE, DataT, ElectionBase, Leader, Observation, data_arg, leader, observe_next
from ._flow import drive
from .lock import Lock

__all__ = ["Election", "Leader"]


class Election(ElectionBase[Lock]):
    """One candidate of the election ``name``: at most one candidate leads at a time, in a term
    that is a fencing token.

    ``Election(redis, name, lease=10, data=None, on_lost=None, replicas=0,
    replicas_timeout=1.0)``; ``redis`` is a ``redis.Redis`` or a ``redis.RedisCluster``.

    - ``campaign(timeout=None)`` waits in the server until this candidate leads
      (``LOCK.ACQUIRE name token PX lease EPHEMERAL DATA data BLOCK …``: first come, first
      served among the candidates) and returns the term (the grant's fence, greater than every
      term before it); with ``timeout`` (seconds), None if not elected by then. The term is bound
      to a connection the election opens for it (from the client's settings, never one of its
      pool; the server's idle ``timeout`` and the application's timeouts do not touch it): a
      leader whose process dies is succeeded at once. Its lease is renewed in the background
      (every third of ``lease``), on that connection, until ``resign()``, which closes it.
    - ``lost`` (a ``threading.Event``) is set and ``on_lost`` called once (with the election,
      from the process's renewal thread) when leadership is lost: a renewal found the term gone,
      or the lease clock ran out before a renewal was answered — before the server can grant the
      next term —, or the term's connection closed (``CLIENT KILL``, a restart), as soon as its
      socket says so, which may be after the next term was granted. ``is_leader`` turns False
      at the same moment.
    - ``resign()`` ends the term: True if it still led, False otherwise.
    - ``leader()`` says who leads (``LOCK.INFO``): a ``Leader(term, data)``, or None.
    - ``observe()`` yields a ``Leader`` for each new leader, terms strictly increasing
      (``LOCK.OBSERVE … AFTER … BLOCK``), through reconnects (see ``observe``).
    - ``data`` (bytes or a str, 1 to 4096 bytes): public, shown to every observer (an address,
      a host name). ``replicas``, ``replicas_timeout``: a term is granted only once that many
      replicas acknowledged it, as for ``Lock`` (``NotReplicatedError`` otherwise).
    """

    def __init__(
        self,
        redis: Union[redis_py.Redis, redis_py.RedisCluster],
        name: Union[str, bytes],
        *,
        lease: Number = DEFAULT_LEASE,
        data: DataT = None,
        on_lost: Optional[Callable[["Election"], Any]] = None,
        replicas: int = 0,
        replicas_timeout: Number = DEFAULT_REPLICAS_TIMEOUT,
    ) -> None:
        value = data_arg(data)
        lock = Lock(
            redis,
            name,
            lease=lease,
            thread_local=False,
            ephemeral=True,
            on_lost=self._signal_lost,
            replicas=replicas,
            replicas_timeout=replicas_timeout,
        )
        super().__init__(lock, name, lease, value, on_lost)
        self.redis = redis

    @property
    def lost(self) -> threading.Event:
        event: threading.Event = self._lock.lost
        return event

    @overload
    def campaign(self, timeout: None = None) -> int: ...
    @overload
    def campaign(self, timeout: Number) -> Optional[int]: ...

    def campaign(self, timeout: Optional[Number] = None) -> Optional[int]:
        """The term, once this candidate leads (at once if it leads already); with ``timeout``
        seconds, None if not elected by then (0: without waiting). A wait whose connection drops
        is sent once more with the time left, at the back of the queue."""
        lock: Lock = self._lock
        return lock._asking(self._campaign(timeout))

    def resign(self) -> bool:
        """Ends the term (``LOCK.RELEASE``): True if this candidate still led, False if it did
        not lead or had lost its term. Without an answer the term is kept (``TimeoutError``,
        ``ConnectionError``): call it again."""
        lock: Lock = self._lock
        return lock._drive(self._resign())

    def leader(self) -> Optional[Leader]:
        """Who leads now: ``Leader(term, data)``, or None when nobody does (``LOCK.INFO``)."""
        return drive(leader(self.name), self._lock._carry)

    def observe(self) -> Iterator[Leader]:
        """Each new leader, as it is granted: the current one first (if any), then every later
        one, terms strictly increasing. Between two leaders (nobody leads) it yields nothing.
        Each wait is ``LOCK.OBSERVE name AFTER <fence last seen> BLOCK`` (at most 5 s, then sent
        again), on a connection of the lock's own; a connection that fails is opened again and
        the wait re-armed with the fence last seen, so a leader granted meanwhile is yielded at
        once. It never ends by itself; needs a server with ``LOCK.OBSERVE``
        (``UnsupportedError`` otherwise)."""
        observation = Observation(self.name)
        while True:
            yield drive(observe_next(observation), self._lock._carry)

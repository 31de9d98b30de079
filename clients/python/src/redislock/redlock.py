"""Redlock over independent redislock servers (no replication between them)."""

from __future__ import annotations

import random
import time
from types import TracebackType
from typing import Any, Dict, Optional, Sequence, Type

from redis.exceptions import LockError, LockNotOwnedError, RedisError

from ._common import Number, lock_error, new_token, parse_grant, to_ms

__all__ = ["Redlock", "RedlockError"]


class RedlockError(LockError):
    """No majority of the servers granted the lock in time."""


class Redlock:
    """One lock over N independent servers, held while a majority grants it.

    Each attempt sends ``LOCK.ACQUIRE name token PX ttl`` with one client-chosen token to every
    server (a retried call re-grants, it never takes a second lock), counts the grants, and
    keeps the lock if a majority granted it with time to spare: ``validity = ttl - elapsed -
    drift`` where ``drift = ttl * drift_factor + 2 ms``. Otherwise it releases everywhere and,
    up to ``retry_count`` times, tries again after a random delay of at most ``retry_delay``
    seconds. Give the clients a ``socket_timeout`` much shorter than ``ttl``: a server that does
    not answer must not use up the lease.

    ``fences`` maps the index of each granting server to its fence. Fences of different servers
    are not comparable with each other.
    """

    def __init__(
        self,
        clients: Sequence[Any],
        name: str,
        ttl: Number = 10.0,
        *,
        retry_count: int = 3,
        retry_delay: Number = 0.2,
        drift_factor: float = 0.01,
    ) -> None:
        if not clients:
            raise ValueError("Redlock needs at least one server")
        self.clients = list(clients)
        self.name = name
        self.ttl = ttl
        self._ttl_ms = to_ms(ttl, "ttl")
        self.retry_count = retry_count
        self.retry_delay = retry_delay
        self.drift_factor = drift_factor
        self.quorum = len(self.clients) // 2 + 1
        self.token: Optional[bytes] = None
        self.fences: Dict[int, int] = {}
        self._valid_until = 0.0

    def __enter__(self) -> "Redlock":
        if self.acquire():
            return self
        raise lock_error(
            RedlockError, f"no majority of {len(self.clients)} servers granted the lock", self.name
        )

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockError:
            if exc_type is None:
                raise

    @property
    def validity(self) -> float:
        """Seconds the lock is still known to be held by a majority (0 when not held)."""
        if self.token is None:
            return 0.0
        return max(0.0, self._valid_until - time.monotonic())

    def _drift(self) -> float:
        return self.ttl * self.drift_factor + 0.002

    def acquire(self) -> bool:
        for attempt in range(self.retry_count + 1):
            token = new_token()
            started = time.monotonic()
            fences: Dict[int, int] = {}
            for i, client in enumerate(self.clients):
                try:
                    grant = parse_grant(
                        client.execute_command("LOCK.ACQUIRE", self.name, token, "PX", self._ttl_ms)
                    )
                except (RedisError, OSError):
                    grant = None
                if grant is not None:
                    fences[i] = grant[1]
            validity = self.ttl - (time.monotonic() - started) - self._drift()
            if len(fences) >= self.quorum and validity > 0:
                self.token = token
                self.fences = fences
                self._valid_until = started + self.ttl - self._drift()
                return True
            self._release_everywhere(token)
            if attempt < self.retry_count:
                time.sleep(random.uniform(0, self.retry_delay))  # back off; others may finish
        return False

    def extend(self, ttl: Optional[Number] = None) -> bool:
        """Reset the lease on every server to ``ttl`` (default: the lock's); True if a majority
        extended in time, ``LockNotOwnedError`` otherwise."""
        token = self.token
        if token is None:
            raise lock_error(LockError, "Cannot extend an unlocked lock", self.name)
        seconds = self.ttl if ttl is None else ttl
        ttl_ms = to_ms(seconds, "ttl")
        started = time.monotonic()
        extended = 0
        for client in self.clients:
            try:
                if client.execute_command("LOCK.EXTEND", self.name, token, "PX", ttl_ms) == 1:
                    extended += 1
            except (RedisError, OSError):
                pass
        drift = seconds * self.drift_factor + 0.002
        if extended >= self.quorum and time.monotonic() - started < seconds - drift:
            self._valid_until = started + seconds - drift
            return True
        raise lock_error(LockNotOwnedError, "Cannot extend a lock that's no longer owned", self.name)

    def release(self) -> None:
        """Release on every server; ``LockNotOwnedError`` if none still held it."""
        token = self.token
        if token is None:
            raise lock_error(
                LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name
            )
        self.token = None
        self.fences = {}
        if self._release_everywhere(token) == 0:
            raise lock_error(LockNotOwnedError, "Cannot release a lock that's no longer owned", self.name)

    def _release_everywhere(self, token: bytes) -> int:
        released = 0
        for client in self.clients:
            try:
                released += int(client.execute_command("LOCK.RELEASE", self.name, token) == 1)
            except (RedisError, OSError):
                pass
        return released

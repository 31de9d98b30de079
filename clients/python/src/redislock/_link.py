"""The lock's own connections to its server: no retries, every command bounded in time.

redis-py's client retries a command that timed out or lost its connection (redis-py 8: three
times, with backoff) and reads with ``socket_timeout`` (5 s by default). Neither fits a lock: a
wait in the server (``BLOCK``) outlives the read timeout, and a re-sent wait loses its place in
the queue; a renewal or a release must give up when the lease is over, not a minute later. So
the lock's commands go through a small pool of connections of its own, built with the client's
connection settings (host, port, TLS, auth, protocol, decoding) but without retries, each read
bounded by the time the caller can spend.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
import weakref
from typing import Any, List, Optional

import redis as redis_py
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry

#: How long after a wait's own timeout its answer may still come: the server answers at the
#: timeout, the answer then crosses the network once (200 ms each way still fits).
WAIT_GRACE = 0.45


def own_connections(pool: Any) -> "tuple[Any, dict]":
    """The connection class and settings of the client's pool, without its retries: a lock's
    own connections never re-send a command behind the caller's back."""
    kwargs = dict(pool.connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs.pop("retry_on_error", None)
    kwargs.pop("retry_on_timeout", None)
    return pool.connection_class, kwargs


class Link:
    """Connections of the lock's own to one server, shared by every lock on the same pool."""

    def __init__(self, pool: Any) -> None:
        self._class, self._kwargs = own_connections(pool)
        #: The client's own read timeout: the bound of a command that has no other.
        self.default_timeout: Optional[float] = self._kwargs.get("socket_timeout")
        self._idle: List[Any] = []
        self._mutex = threading.Lock()
        self._pid = os.getpid()
        self._warming = False

    def keep_spare(self) -> None:
        """Opens a second connection in the background if there is none idle: a release must
        not wait for a new connection's handshake while a renewal has the other one."""
        with self._mutex:
            if self._warming or len(self._idle) >= 2:
                return
            self._warming = True
        threading.Thread(target=self._warm, name="redislock-connect", daemon=True).start()

    def _warm(self) -> None:
        try:
            conn = self._class(**self._kwargs)
            conn.connect()
            self._give_back(conn)
        except Exception:  # unreachable now: a command will connect when it needs to
            pass
        finally:
            self._warming = False

    def _take(self) -> Any:
        with self._mutex:
            if self._pid != os.getpid():
                # A forked child must not share the parent's sockets: forget them, unclosed.
                self._idle = []
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop(), True
        return self._class(**self._kwargs), False

    def _give_back(self, conn: Any) -> None:
        with self._mutex:
            if self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.disconnect()

    def call(
        self,
        args: List[Any],
        timeout: Optional[float],
        idempotent: bool = True,
        wait_until: Optional[float] = None,
    ) -> Any:
        """Send one command and read its reply, within ``timeout`` seconds in all (None: no
        limit). With ``wait_until`` (a time.monotonic() moment), the command waits in the server:
        ``BLOCK`` with the time left once connected is appended, and the reply may take that long
        plus ``WAIT_GRACE``; None if no time is left. A connection found closed is replaced once
        if the command is ``idempotent``; every other failure raises (``ConnectionError``,
        ``TimeoutError``)."""
        conn, reused = self._take()
        try:
            return self._call_on(conn, args, timeout, wait_until)
        except (ConnectionError, OSError) as err:
            if isinstance(err, TimeoutError) or not (reused and idempotent):
                raise
            # A pooled connection the server closed meanwhile (restart, idle timeout, kill).
            conn = self._class(**self._kwargs)
            return self._call_on(conn, args, timeout, wait_until)

    def _call_on(
        self, conn: Any, args: List[Any], timeout: Optional[float], wait_until: Optional[float]
    ) -> Any:
        try:
            if wait_until is not None:
                timeout = wait_until + WAIT_GRACE - time.monotonic()
            deadline = None if timeout is None else time.monotonic() + timeout
            if timeout is not None and timeout <= 0:
                raise TimeoutError("no time left for the command")
            conn.socket_timeout = timeout
            conn.socket_connect_timeout = timeout
            conn.connect()
            if wait_until is not None:
                left_ms = int((wait_until - time.monotonic()) * 1000)
                if left_ms <= 0:
                    self._give_back(conn)
                    return None
                args = [*args, "BLOCK", left_ms]
                deadline = wait_until + WAIT_GRACE
            conn.send_command(*args)
            if deadline is not None:  # what the handshake of a new connection left
                timeout = max(deadline - time.monotonic(), 0.001)
            reply = conn.read_response(timeout=timeout)
        except BaseException:
            conn.disconnect()
            raise
        self._give_back(conn)
        return reply

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()


def call_on_client(client: Any, args: List[Any], timeout: Optional[float]) -> Any:
    """One command on a connection of the client's own (its single connection, or one of its
    pool's), without the client's retries and bounded by ``timeout``: for a hold bound to the
    connection that asked for it (EPHEMERAL), which must be the application's."""
    single = getattr(client, "connection", None)
    if single is not None:
        with client.single_connection_lock:
            return _bounded_call(single, args, timeout)
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return _bounded_call(conn, args, timeout)
    finally:
        pool.release(conn)


def _bounded_call(conn: Any, args: List[Any], timeout: Optional[float]) -> Any:
    conn.send_command(*args)
    return conn.read_response(timeout=timeout)


_links: "weakref.WeakKeyDictionary[Any, Link]" = weakref.WeakKeyDictionary()
_links_mutex = threading.Lock()


def link_for(client: Any, name: Any) -> Optional[Link]:
    """The Link to the server of ``name`` for this client, or None where the client's pool
    cannot be copied (Sentinel, a custom pool): the lock then sends through the client."""
    target = client
    if isinstance(client, redis_py.RedisCluster):
        try:
            target = client.get_node_from_key(name).redis_connection
        except Exception:  # slots not known yet: go through the cluster client
            return None
    pool = getattr(target, "connection_pool", None)
    if not isinstance(target, redis_py.Redis) or type(pool) not in (
        redis_py.ConnectionPool,
        redis_py.BlockingConnectionPool,
    ):
        return None
    with _links_mutex:
        link = _links.get(pool)
        if link is None:
            link = _links[pool] = Link(pool)
        return link


def bounded(*timeouts: Optional[float]) -> Optional[float]:
    """The smallest of the bounds that are set (None when none is)."""
    given = [t for t in timeouts if t is not None]
    return min(given) if given else None




class AsyncLink:
    """``Link`` for ``redis.asyncio``: the lock's own connections, bounded with ``wait_for``."""

    def __init__(self, pool: Any) -> None:
        self._class, self._kwargs = own_connections(pool)
        self.default_timeout: Optional[float] = self._kwargs.get("socket_timeout")
        self._idle: List[Any] = []

    async def call(
        self,
        args: List[Any],
        timeout: Optional[float],
        idempotent: bool = True,
        wait_until: Optional[float] = None,
    ) -> Any:
        reused = bool(self._idle)
        conn = self._idle.pop() if reused else self._class(**self._kwargs)
        try:
            return await self._call_on(conn, args, timeout, wait_until)
        except (ConnectionError, OSError) as err:
            if isinstance(err, TimeoutError) or not (reused and idempotent):
                raise
            return await self._call_on(self._class(**self._kwargs), args, timeout, wait_until)

    async def _call_on(
        self, conn: Any, args: List[Any], timeout: Optional[float], wait_until: Optional[float]
    ) -> Any:
        async def exchange() -> Any:
            await conn.connect()
            command = args
            if wait_until is not None:
                left_ms = int((wait_until - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return None
                command = [*args, "BLOCK", left_ms]
            await conn.send_command(*command)
            return await conn.read_response(timeout=math.inf)

        if wait_until is not None:
            timeout = wait_until + WAIT_GRACE - time.monotonic()
        try:
            if timeout is not None and timeout <= 0:
                raise TimeoutError("no time left for the command")
            try:
                reply = await asyncio.wait_for(exchange(), timeout)
            except asyncio.TimeoutError as err:
                raise TimeoutError("no answer within the time left") from err
        except BaseException:
            # Cancelled or failed mid-command: the connection's state is unknown, drop it.
            await _drop(conn)
            raise
        self._idle.append(conn)
        return reply


async def _drop(conn: Any) -> None:
    try:
        await asyncio.shield(conn.disconnect(nowait=True))
    except BaseException:  # closing a broken connection may fail in many ways; it is gone
        pass


async def async_call_on_client(client: Any, args: List[Any], timeout: Optional[float]) -> Any:
    """``call_on_client`` for ``redis.asyncio`` clients."""

    async def exchange(conn: Any) -> Any:
        await conn.send_command(*args)
        return await conn.read_response(timeout=math.inf)

    single = getattr(client, "connection", None)
    if single is not None:
        async with client._single_conn_lock:
            return await _bounded(exchange(single), timeout, single)
    pool = client.connection_pool
    conn = await pool.get_connection()
    try:
        return await _bounded(exchange(conn), timeout, conn)
    finally:
        await pool.release(conn)


async def _bounded(work: Any, timeout: Optional[float], conn: Any) -> Any:
    try:
        return await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError as err:
        await _drop(conn)
        raise TimeoutError("no answer within the time left") from err
    except BaseException:
        await _drop(conn)
        raise


_async_links: "weakref.WeakKeyDictionary[Any, AsyncLink]" = weakref.WeakKeyDictionary()


def async_link_for(client: Any, name: Any) -> Optional[AsyncLink]:
    """``link_for`` for ``redis.asyncio`` clients (one event loop per pool, as redis-py's)."""
    from redis import asyncio as aredis

    target = client
    if isinstance(client, aredis.RedisCluster):
        try:
            target = client.get_node_from_key(name).redis_connection
        except Exception:
            return None
    pool = getattr(target, "connection_pool", None)
    if not isinstance(target, aredis.Redis) or type(pool) not in (
        aredis.ConnectionPool,
        aredis.BlockingConnectionPool,
    ):
        return None
    link = _async_links.get(pool)
    if link is None:
        link = _async_links[pool] = AsyncLink(pool)
    return link

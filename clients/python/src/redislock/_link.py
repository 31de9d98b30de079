"""How a lock's request reaches the server: the I/O of the two front ends.

On a single server (``redis.Redis``, ``redis.asyncio.Redis``) the lock's commands go through a
small pool of connections of its own, built with the client's connection settings (host, port,
TLS, auth, protocol, decoding) but without retries, each read bounded by the time the caller
can spend: redis-py's client retries a command that timed out or lost its connection, and reads
with ``socket_timeout``; neither fits a lock (a wait in the server outlives the read timeout, a
re-sent wait loses its place in the queue, a renewal or a release must give up when the lease is
over).

On a Cluster (``redis.RedisCluster``, ``redis.asyncio.RedisCluster``) every command goes
through the cluster client itself, so that redis-py follows ``MOVED``, ``ASK`` and ``TRYAGAIN``
and refreshes the topology after a failover, on the same client object; a wait's ``BLOCK``
reads as the time left each time the client sends it (``BlockLeft``). A request with
follow-ups (``WAIT`` after a grant or a renewal of a lock made with ``replicas=``) is the
exception: it goes on a connection of the lock's own to the node serving the key
(``_followups``), since the cluster client would send each command on a connection of its choice.

Where the client's pool cannot be copied (Sentinel, a custom pool) the commands go through the
client as well; a request with follow-ups goes on one connection of the client's pool
(``_conn.call_on_client``).

A hold bound to a connection (``EPHEMERAL``, every Election term) has one connection of its own
for its grant, renewals and release (``_owned``, ``_aowned``), which carry each command with
``exchange`` / ``aexchange`` as this module's connections do.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

import redis as redis_py
from redis import asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError, ResponseError, TimeoutError
from redis.retry import Retry

from ._conn import _drop, aroundtrip, async_call_on_client, call_on_client, roundtrip, within
from ._flow import BlockLeft, Send, block_arg
from ._followups import acluster_send, afollow_on, cluster_send, follow_on

#: How long after a wait's own timeout its answer may still come: the server answers at the
#: timeout, the answer then crosses the network once (200 ms each way still fits).
WAIT_GRACE = 0.45


def own_connections(pool: Any) -> Tuple[Any, Dict[str, Any]]:
    """The connection class and settings of the client's pool, without its retries: a lock's
    own connections never re-send a command behind the caller's back."""
    kwargs = dict(pool.connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs.pop("retry_on_error", None)
    kwargs.pop("retry_on_timeout", None)
    return pool.connection_class, kwargs


def bounded(*timeouts: Optional[float]) -> Optional[float]:
    """The smallest of the bounds that are set (None when none is)."""
    given = [t for t in timeouts if t is not None]
    return min(given) if given else None


def send_again(err: BaseException, reused: bool, idempotent: bool) -> bool:
    """A pooled connection the server closed meanwhile (restart, idle timeout, kill): an
    idempotent command goes once more on a fresh one."""
    return isinstance(err, (ConnectionError, OSError)) and not isinstance(err, TimeoutError) and reused and idempotent


def read_bound(req: Send, default: Optional[float]) -> Optional[float]:
    """How long the reply to ``req`` may take: a wait, as long as it waits plus ``WAIT_GRACE``;
    ``BLOCK 0``, without limit; anything else the client's ``socket_timeout`` or the request's
    own tighter bound."""
    if req.forever:
        return None
    if req.wait_until is not None:
        return req.wait_until + WAIT_GRACE - time.monotonic()
    return bounded(default, req.bound)


def command_now(req: Send) -> Optional[List[Any]]:
    """The command line to send now: a wait gets ``BLOCK`` with the time left (None: none
    is)."""
    if req.wait_until is None:
        return req.args
    left_ms = block_arg(req.wait_until, time.monotonic())
    return None if left_ms is None else [*req.args, "BLOCK", left_ms]


def cluster_command(req: Send, socket_timeout: Optional[float]) -> List[Any]:
    """The command line for a Cluster client, which may send it again after a redirect: a
    wait's ``BLOCK`` reads as the time left whenever it is sent, and a wait longer than the
    client's read timeout is cut into parts (each comes back empty and the lock goes on with
    the time left)."""
    part = None if not socket_timeout else max(socket_timeout - 0.5, socket_timeout / 2)
    if req.forever and part is not None:  # BLOCK 0, in parts
        return [*req.args[:-1], int(part * 1000)]
    if req.wait_until is None:
        return req.args
    until = req.wait_until if part is None else min(req.wait_until, time.monotonic() + part)
    return [*req.args, "BLOCK", BlockLeft(until)]


class Link:
    """Connections of the lock's own to one server, shared by every lock on the same pool."""

    def __init__(self, pool: Any) -> None:
        self._class, self._kwargs = own_connections(pool)
        #: The client's own read timeout: the bound of a command that has no other.
        self.default_timeout: Optional[float] = self._kwargs.get("socket_timeout")
        self._idle: List[Any] = []
        self._mutex = threading.Lock()
        self._pid = os.getpid()

    def spare(self) -> None:
        """Opens a second connection if there is none idle: a release must not wait for a new
        connection's handshake while a renewal has the other one. (Run by the renewal worker.)"""
        with self._mutex:
            if len(self._idle) >= 2:
                return
        try:
            conn = self._class(**self._kwargs)
            conn.connect()
            self._give_back(conn)
        except Exception:  # unreachable now: a command will connect when it needs to
            pass

    def _take(self) -> Tuple[Any, bool]:
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

    def call(self, req: Send, asking: bool = False) -> Any:
        """Send one command and read its reply within its bound (see ``read_bound``), then its
        follow-ups on the same connection (``asking``: ASKING first, a Cluster's ASK)."""
        conn, reused = self._take()
        try:
            return self._call_on(conn, req, asking)
        except Exception as err:
            if not send_again(err, reused, req.idempotent):
                raise
            return self._call_on(self._class(**self._kwargs), req, asking)

    def _call_on(self, conn: Any, req: Send, asking: bool = False) -> Any:
        reply, fit = exchange(conn, req, self.default_timeout, asking)
        if fit:
            self._give_back(conn)
        else:
            conn.disconnect()
        return reply


def exchange(conn: Any, req: Send, default: Optional[float], asking: bool = False) -> Tuple[Any, bool]:
    """One request on ``conn`` (connected first if need be), its read bounded as
    ``read_bound`` says: the reply (with its follow-ups') and whether the connection is fit for
    more. An error reply leaves it as it was (the reply was read whole); any other failure
    disconnects it: its state is unknown."""
    try:
        timeout = read_bound(req, default)
        deadline = None if timeout is None else time.monotonic() + timeout
        if timeout is not None and timeout <= 0:
            raise TimeoutError("no time left for the command")
        conn.socket_timeout = timeout
        conn.socket_connect_timeout = timeout
        conn.connect()
        if asking:
            conn.send_command("ASKING")
            conn.read_response(timeout=timeout)
        args = command_now(req)
        if args is None:
            return None, True
        conn.send_command(*args)
        if deadline is not None:  # what the handshake of a new connection left
            timeout = max(deadline - time.monotonic(), 0.001)
        reply = conn.read_response(timeout=timeout)
        return follow_on(req.follow, reply, lambda a, t: roundtrip(conn, a, t))
    except ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise


class AsyncLink:
    """``Link`` for ``redis.asyncio``: the lock's own connections, bounded with ``wait_for``."""

    def __init__(self, pool: Any) -> None:
        self._class, self._kwargs = own_connections(pool)
        self.default_timeout: Optional[float] = self._kwargs.get("socket_timeout")
        self._idle: List[Any] = []

    async def call(self, req: Send, asking: bool = False) -> Any:
        reused = bool(self._idle)
        conn = self._idle.pop() if reused else self._class(**self._kwargs)
        try:
            return await self._call_on(conn, req, asking)
        except Exception as err:
            if not send_again(err, reused, req.idempotent):
                raise
            return await self._call_on(self._class(**self._kwargs), req, asking)

    async def _call_on(self, conn: Any, req: Send, asking: bool = False) -> Any:
        reply, fit = await aexchange(conn, req, self.default_timeout, asking)
        if fit:
            self._idle.append(conn)
        else:
            await _drop(conn)
        return reply


async def aexchange(conn: Any, req: Send, default: Optional[float], asking: bool = False) -> Tuple[Any, bool]:
    """``exchange`` for ``redis.asyncio`` connections, bounded with ``wait_for``; cancelled or
    failed mid-command, the connection is dropped."""

    async def run() -> Any:
        await conn.connect()
        if asking:
            await conn.send_command("ASKING")
            await conn.read_response(timeout=math.inf)
        args = command_now(req)
        if args is None:
            return None
        await conn.send_command(*args)
        return await conn.read_response(timeout=math.inf)

    timeout = read_bound(req, default)
    try:
        if timeout is not None and timeout <= 0:
            raise TimeoutError("no time left for the command")
        reply = await within(run(), timeout)
        result: Tuple[Any, bool] = await afollow_on(req.follow, reply, lambda a, t: within(aroundtrip(conn, a), t))
        return result
    except ResponseError:
        raise
    except BaseException:
        await _drop(conn)
        raise


def on_client(client: Any, req: Send, default: Optional[float]) -> Tuple[Optional[List[Any]], Optional[float]]:
    """A command sent through the application's client (one whose pool cannot be copied): its
    command line now and its read bound."""
    return command_now(req), read_bound(req, default)


_links: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_links_mutex = threading.Lock()


def _link_of(client: Any, kind: Type[Any], pools: Tuple[Type[Any], ...], make: Callable[[Any], Any]) -> Any:
    """The link of ``client``'s pool (made once per pool), or None where the pool cannot be
    copied (Sentinel, a custom pool): the lock then sends through the client."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(client, kind) or type(pool) not in pools:
        return None
    with _links_mutex:
        link = _links.get(pool)
        if link is None:
            link = _links[pool] = make(pool)
        return link


def link_for(client: Any) -> Optional[Link]:
    pools = (redis_py.ConnectionPool, redis_py.BlockingConnectionPool)
    link: Optional[Link] = _link_of(client, redis_py.Redis, pools, Link)
    return link


def pool_link(pool: Any) -> Link:
    """The link of a Cluster node's pool (``redis.RedisCluster``): for follow-ups."""
    with _links_mutex:
        link: Optional[Link] = _links.get(pool)
        if link is None:
            link = _links[pool] = Link(pool)
        return link


_node_links: "weakref.WeakKeyDictionary[Any, Dict[str, AsyncLink]]" = weakref.WeakKeyDictionary()


def node_link(cluster: Any, node: Any) -> AsyncLink:
    """The link of a node of a ``redis.asyncio`` Cluster client (with the node's connection
    settings), for follow-ups: one per client and node, as the client's own connections."""
    links = _node_links.setdefault(cluster, {})
    link = links.get(node.name)
    if link is None:
        link = links[node.name] = AsyncLink(node)
    return link


def async_link_for(client: Any) -> Optional[AsyncLink]:
    """One link per pool, and so per event loop, as redis-py's pools."""
    pools = (aredis.ConnectionPool, aredis.BlockingConnectionPool)
    link: Optional[AsyncLink] = _link_of(client, aredis.Redis, pools, AsyncLink)
    return link


def _callbacks(client: Any) -> Any:
    """redis-py's reply callbacks of ``client`` (of a node of a Cluster client)."""
    callbacks = getattr(client, "response_callbacks", None)
    if callbacks is None and hasattr(client, "get_default_node"):
        try:
            node = client.get_default_node()
            callbacks = getattr(getattr(node, "redis_connection", None) or node, "response_callbacks", None)
        except Exception:  # no node known yet: replies as they come
            callbacks = None
    return callbacks


def shaper(client: Any) -> Callable[[Any, Any], Any]:
    """Gives the reply of a command run inside LOCK.CALL or LOCK.FENCE the shape redis-py gives
    it for the command sent directly (``SET`` → ``True``, ``HGETALL`` → a dict, …)."""

    def shape(command: Any, reply: Any) -> Any:
        callbacks = _callbacks(client)
        if not callbacks or not command:
            return reply
        words = [w.decode() if isinstance(w, bytes) else str(w) for w in command[:2]]
        names = [" ".join(words).upper(), words[0].upper()] if len(words) == 2 else [words[0].upper()]
        for name in names:
            if name in callbacks:
                try:
                    return callbacks[name](reply)
                except Exception:  # a callback that needs the command's options: as it came
                    return reply
        return reply

    return shape


def send(client: Any, req: Send) -> Any:
    """Carries one request out for the sync lock."""
    if isinstance(client, redis_py.RedisCluster):
        cluster: Any = client
        if req.follow is not None:
            return cluster_send(cluster, req, pool_link)
        timeout = cluster.nodes_manager.connection_kwargs.get("socket_timeout")
        return cluster.execute_command(*cluster_command(req, timeout))
    link = link_for(client)
    if link is not None:
        return link.call(req)
    args, timeout = on_client(client, req, None)
    if args is None:
        return None
    if req.follow is None:
        return client.execute_command(*args)
    # The follow-ups must go on the connection of the command.
    return call_on_client(client, args, timeout, req.follow)


async def asend(client: Any, req: Send) -> Any:
    """Carries one request out for the asyncio lock."""
    if isinstance(client, AsyncRedisCluster):
        if req.follow is not None:
            return await acluster_send(client, req, node_link)
        timeout = client.connection_kwargs.get("socket_timeout")
        return await client.execute_command(*cluster_command(req, timeout))
    link = async_link_for(client)
    if link is not None:
        return await link.call(req)
    args, timeout = on_client(client, req, None)
    if args is None:
        return None
    if req.follow is None:
        return await client.execute_command(*args)
    return await async_call_on_client(client, args, timeout, req.follow)

"""The connection a bound hold lives on, for ``redis.asyncio`` (see ``_owned`` for the sync one
and what it is for): one connection of the library's own per bound hold, its commands one at a
time, and between them a task of the hold's event loop that waits on the connection's reader.
The reader returns only at EOF, or raises at a reset: either way the server closed the
connection, and so released the hold, and the front end is told at once (``on_close``). The
task is cancelled before each command (a wait on the reader that is cancelled reads nothing)
and started again after it; after ``KEEPALIVE`` seconds of silence it sends a ``PING``, so the
server's idle ``timeout`` never closes the connection while the hold lives."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, Optional, Set, Tuple

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import AskError, ConnectionError, MovedError, ResponseError

from ._conn import _drop
from ._flow import Request, Send
from ._link import aexchange, own_connections
from ._owned import KEEPALIVE

__all__ = ["AsyncOwned", "acarrier", "aowned_for"]

#: Closes that were started where nothing could await them (a loss seen by the schedule).
_closing: Set["asyncio.Task[None]"] = set()


def settings(client: Any, key: Any, node: Any = None) -> Tuple[Any, Dict[str, Any]]:
    """As ``_owned.settings``, for ``redis.asyncio`` clients (a Cluster's node has the settings
    of its connections itself)."""
    if isinstance(client, AsyncRedisCluster):
        cluster: Any = client
        cls, kwargs = own_connections(node if node is not None else cluster.get_node_from_key(key))
    else:
        cls, kwargs = own_connections(client.connection_pool)
    kwargs["socket_timeout"] = None
    return cls, kwargs


def aowned_for(client: Any, key: Any, default: float) -> Optional["AsyncOwned"]:
    """As ``_owned.owned_for``."""
    if not isinstance(client, AsyncRedisCluster) and getattr(client, "connection_pool", None) is None:
        return None
    return AsyncOwned(client, key, default)


class AsyncOwned:
    """One connection of the library's own for one bound hold (see the module)."""

    def __init__(self, client: Any, key: Any, default: float) -> None:
        self._client = client
        self._key = key
        self._class, self._kwargs = settings(client, key)
        self._conn = self._class(**self._kwargs)
        self._asking = False
        self.default = default
        self._mutex = asyncio.Lock()
        self.pinned = False
        self.dead = False
        self._watching: Optional["asyncio.Task[None]"] = None
        self._on_close: Optional[Callable[[], None]] = None

    def usable(self) -> bool:
        return not self.dead

    async def call(self, req: Send) -> Any:
        """As ``_owned.Owned.call``."""
        async with self._mutex:
            await self._pause()
            if self.pinned and not self.dead and not self._conn.is_connected:
                self._end(signal=True)  # closed under the hold: it is not opened again
            if self.dead:
                raise ConnectionError("the hold's connection is closed")
            try:
                reply, fit = await aexchange(self._conn, req, self.default, self._asking)
            except (MovedError, AskError) as err:
                if not self.pinned:
                    await self._redirect(err)
                raise
            except ResponseError:
                raise
            except BaseException:
                self._failed()
                raise
            finally:
                self._resume()
            if not fit:
                self._failed()
            return reply

    async def _redirect(self, err: ResponseError) -> None:
        if not isinstance(self._client, AsyncRedisCluster):
            return
        client: Any = self._client
        node = None
        if isinstance(err, AskError):
            node = client.get_node(host=err.host, port=err.port)
        else:
            try:
                await client.nodes_manager.initialize()
            except Exception:  # no node answers now: the next try asks again
                pass
        await _drop(self._conn)
        self._class, self._kwargs = settings(client, self._key, node)
        self._conn = self._class(**self._kwargs)
        self._asking = node is not None

    def _failed(self) -> None:
        if self.pinned:
            self._end(signal=True)

    async def _pause(self) -> None:
        task, self._watching = self._watching, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _resume(self) -> None:
        if self.pinned and not self.dead and self._watching is None:
            self._watching = asyncio.ensure_future(self._watch())

    def watch(self, on_close: Callable[[], None]) -> None:
        """The hold was granted on this connection: from now on its close is ``on_close()``."""
        self._asking = False
        self.pinned = True
        self._on_close = on_close
        self._resume()

    async def _watch(self) -> None:
        reader = getattr(self._conn, "_reader", None)
        if reader is not None:
            try:
                while True:
                    try:
                        # b"" at EOF; data nobody asked for ends it as well
                        await asyncio.wait_for(reader.read(1), KEEPALIVE)
                        break
                    except asyncio.TimeoutError:
                        await self._ping()
            except asyncio.CancelledError:
                raise
            except Exception:  # a reset, or a PING unanswered within the lease
                pass
        self._watching = None
        self._end(signal=True)

    async def _ping(self) -> None:
        """A keep-alive after ``KEEPALIVE`` seconds of silence, so the server's idle ``timeout``
        never closes the connection while the hold lives. Under the mutex: a command waits for
        it rather than cancel it halfway (which would leave its reply unread)."""
        async with self._mutex:
            await asyncio.wait_for(self._ping_once(), self.default)

    async def _ping_once(self) -> None:
        await self._conn.send_command("PING")
        await self._conn.read_response()

    def close(self) -> None:
        """The hold ended: the connection is closed (nothing more is signalled)."""
        self._end(signal=False)

    async def aclose(self) -> None:
        """``close()``, awaited until the connection is closed."""
        self._end(signal=False)
        await self._pause()
        await _drop(self._conn)

    def _end(self, signal: bool) -> None:
        if self.dead:
            return
        self.dead = True
        task, self._watching = self._watching, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        closing = asyncio.ensure_future(_drop(self._conn))
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
        callback, self._on_close = self._on_close, None
        if signal and callback is not None:
            callback()


def acarrier(
    plain: Callable[[Request], Awaitable[Any]], owned: Optional[AsyncOwned]
) -> Callable[[Request], Awaitable[Any]]:
    """As ``_owned.carrier``, awaited."""

    async def carry(request: Request) -> Any:
        if isinstance(request, Send) and request.own and owned is not None and owned.usable():
            try:
                return await owned.call(request)
            except (MovedError, AskError):
                if not owned.pinned:
                    raise
                owned.close()
        return await plain(request)

    return carry

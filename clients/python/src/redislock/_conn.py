"""One exchange on one connection, and commands on connections of the application's client.

``roundtrip`` (``aroundtrip`` for asyncio) sends one more command on a connection already in
use, as a request's follow-ups need (see ``_followups``). ``call_on_client`` sends a request on
a connection of the application's own client, with its follow-ups on the same connection: a
client whose pool the lock cannot copy (Sentinel, a custom pool) has its follow-ups sent this
way, since the client would send each command on a connection of its choice. (A hold bound to
a connection, ``EPHEMERAL``, lives on a connection of the library's own: ``_owned``.)
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, List, Optional

from redis.exceptions import ResponseError, TimeoutError

from ._flow import Follow
from ._followups import afollow_on, follow_on


def roundtrip(conn: Any, args: List[Any], timeout: Optional[float]) -> Any:
    """One more command on a connection already in use, within ``timeout``."""
    conn.send_command(*args)
    return conn.read_response(timeout=timeout)


async def aroundtrip(conn: Any, args: List[Any]) -> Any:
    await conn.send_command(*args)
    return await conn.read_response(timeout=math.inf)


async def within(work: Any, timeout: Optional[float]) -> Any:
    try:
        return await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError as err:
        raise TimeoutError("no answer within the time left") from err


async def _drop(conn: Any) -> None:
    try:
        await asyncio.shield(conn.disconnect(nowait=True))
    except BaseException:  # closing a broken connection may fail in many ways; it is gone
        pass


def call_on_client(client: Any, args: List[Any], timeout: Optional[float], follow: Optional[Follow] = None) -> Any:
    """One command on a connection of the client's own (its single connection, or one of its
    pool's), without the client's retries and bounded by ``timeout``, then its follow-ups on the
    same connection: for follow-ups where the pool cannot be copied."""

    def exchange(conn: Any) -> Any:
        try:
            reply = roundtrip(conn, args, timeout)
            reply, fit = follow_on(follow, reply, lambda a, t: roundtrip(conn, a, t))
        except ResponseError:
            raise
        except BaseException:  # no answer: the connection's state is unknown
            conn.disconnect()
            raise
        if not fit:
            conn.disconnect()
        return reply

    single = getattr(client, "connection", None)
    if single is not None:
        with client.single_connection_lock:
            return exchange(single)
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return exchange(conn)
    finally:
        pool.release(conn)


async def async_call_on_client(
    client: Any, args: List[Any], timeout: Optional[float], follow: Optional[Follow] = None
) -> Any:
    """``call_on_client`` for ``redis.asyncio`` clients."""

    async def exchange(conn: Any) -> Any:
        reply = await within(aroundtrip(conn, args), timeout)
        reply, fit = await afollow_on(follow, reply, lambda a, t: within(aroundtrip(conn, a), t))
        if not fit:
            await _drop(conn)
        return reply

    single = getattr(client, "connection", None)
    conn = single if single is not None else await client.connection_pool.get_connection()
    try:
        if single is not None:
            async with client._single_conn_lock:
                return await exchange(conn)
        return await exchange(conn)
    except BaseException:
        await _drop(conn)
        raise
    finally:
        if single is None:
            await client.connection_pool.release(conn)

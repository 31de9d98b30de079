"""Both front ends from one test: ``Front("sync", port)`` makes redis-py clients and
``redislock`` locks; ``Front("asyncio", port)`` makes ``redis.asyncio`` clients and
``redislock.asyncio`` locks on an event loop in a thread of its own, whose coroutine methods
are run there and waited for from the test's thread (``Driven``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, List, Optional

import redis
import redis.asyncio as aredis
import redis.asyncio.cluster as acluster
from redis.cluster import RedisCluster

import redislock
import redislock.asyncio as alock

FRONTS = ["sync", "asyncio"]


class Front:
    """Makes clients and locks of one front end; the asyncio ones are called from the test's
    thread and run on the front's own event loop."""

    def __init__(self, kind: str, port: int, cluster: bool = False) -> None:
        self.kind = kind
        self.port = port
        self.cluster = cluster
        self.clients: List[Any] = []
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        if kind == "asyncio":
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(60)

    def client(self, **kwargs: Any) -> Any:
        """A client at redis-py's defaults (a Cluster client on a cluster)."""
        if self.kind == "sync":
            kind: Any = RedisCluster if self.cluster else redis.Redis
            client: Any = kind(host="127.0.0.1", port=self.port, **kwargs)
        else:

            async def make() -> Any:
                if not self.cluster:
                    return aredis.Redis(host="127.0.0.1", port=self.port, **kwargs)
                c = acluster.RedisCluster(host="127.0.0.1", port=self.port, **kwargs)
                await c.initialize()
                return c

            client = self.run(make())
        self.clients.append(client)
        return client

    def lock(self, client: Any, name: str, **kwargs: Any) -> Any:
        if self.kind == "sync":
            return redislock.Lock(client, name, **kwargs)
        return Driven(self, alock.Lock(client, name, **kwargs))

    def election(self, client: Any, name: str, **kwargs: Any) -> Any:
        if self.kind == "sync":
            return redislock.Election(client, name, **kwargs)
        return Driven(self, alock.Election(client, name, **kwargs))

    def gate(self, client: Any, name: str) -> Any:
        if self.kind == "sync":
            return redislock.FenceGate(client, name)
        return Driven(self, alock.FenceGate(client, name))

    def close(self) -> None:
        for c in self.clients:
            if self.kind == "sync":
                c.close()
            else:
                self.run(c.aclose())
        if self.loop is not None:
            self.run(cancel_the_rest())
            self.loop.call_soon_threadsafe(self.loop.stop)


async def cancel_the_rest() -> None:
    """Ends the loop's other tasks (the renewal schedule's), as ``asyncio.run`` does."""
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


class Driven:
    """An asyncio lock (or election) whose coroutine methods are run on the front's loop and
    waited for."""

    def __init__(self, front: Front, lock: Any) -> None:
        self._front = front
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lock, name)
        if not asyncio.iscoroutinefunction(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._front.run(value(*args, **kwargs))

        return call

"""redislock.Lock on a real Redis Cluster of three masters, through redis-py's RedisCluster:
the commands are routed by their key specifications."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.cluster import RedisCluster

import redislock
from servers import Cluster


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(3)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def rc(cluster):
    client = RedisCluster(host="127.0.0.1", port=cluster.port)
    try:
        yield client
    finally:
        client.close()


def names_on_every_node(rc):
    """One lock name per master."""
    names = {}
    i = 0
    while len(names) < 3:
        name = f"lock:{i}"
        node = rc.get_node_from_key(name)
        names.setdefault(node.name, name)
        i += 1
    return list(names.values())


def test_locks_on_every_shard(rc, cluster):
    for name in names_on_every_node(rc):
        with rc.lock(name, timeout=10, lock_class=redislock.Lock) as lock:
            assert lock.fence > 0 and lock.owned()
            node = rc.get_node_from_key(name)
            direct = redis.Redis(host=node.host, port=node.port)
            try:
                assert direct.type(name) == b"redislock"
            finally:
                direct.close()
        assert not lock.locked()


def test_blocking_handoff_and_renewal_in_cluster(rc, cluster):
    name = "{job}:lock"
    holder = redislock.Lock(rc, name, lease=1.0)
    assert holder.acquire()
    got = []

    def wait():
        other = RedisCluster(host="127.0.0.1", port=cluster.port)
        lock = redislock.Lock(other, name, timeout=10)
        got.append(lock.acquire(blocking_timeout=10))
        got.append(lock.fence)
        lock.release()
        other.close()

    t = threading.Thread(target=wait)
    t.start()
    # The holder's lease (1 s) is renewed while the waiter waits in the server.
    holder.lost.wait(2.5)
    assert not holder.lost.is_set() and holder.owned()
    holder.release()
    t.join(10)
    assert got[0] is True and got[1] > holder.local.fence if holder.local.fence else got[0] is True

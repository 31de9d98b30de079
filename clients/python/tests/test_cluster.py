"""redislock on a real Redis Cluster of three masters, each with a replica, through redis-py's
``RedisCluster`` and ``redis.asyncio.cluster.RedisCluster`` at their default settings: the
commands are routed by their key specifications, and the locks follow a slot migration
(``MOVED``, ``ASK``, ``TRYAGAIN``) and a failover (``kill -9`` of a master, its replica
promoted) on the same client and lock objects.

The asyncio lock runs on an event loop in a thread of its own, driven from the test's thread
(``fronts.Front``), so that one scenario tests both front ends."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

import redislock
import redislock.asyncio
from fronts import FRONTS, Driven, Front
from servers import Cluster, Server

# `make test` runs these on the first and last server of its matrix (scripts/matrix.sh); the
# client's Cluster handling does not depend on the server's version.
pytestmark = pytest.mark.skipif(
    bool(os.environ.get("REDISLOCK_SKIP_CLUSTER")), reason="REDISLOCK_SKIP_CLUSTER is set"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(3, replicas=1, node_timeout=2000)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=cluster.port)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Front]:
    f = Front(request.param, cluster.port, cluster=True)
    try:
        yield f
    finally:
        f.close()


def name_on(cluster: Cluster, master: Server, tag: str) -> str:
    """A lock name whose slot ``master`` serves now."""
    for i in range(10_000):
        name = f"{{{tag}{i}}}lock"
        if cluster.master_of(key_slot(name.encode())) is master:
            return name
    raise RuntimeError("no name found")


def cluster_client(rc: RedisCluster) -> Any:
    """redis-py's RedisCluster, whose methods are not annotated."""
    return rc


def names_on_every_node(rc: RedisCluster) -> List[str]:
    """One lock name per master."""
    names: Dict[str, str] = {}
    i = 0
    while len(names) < 3:
        name = f"lock:{i}"
        node = cluster_client(rc).get_node_from_key(name)
        names.setdefault(node.name, name)
        i += 1
    return list(names.values())


def lock_info(node: Server, name: str, asking: bool = False) -> Any:
    """LOCK.INFO asked of ``node`` directly (with ASKING: of a slot it is importing)."""
    with node.client(single_connection_client=True) as c:
        if asking:
            c.execute_command("ASKING")
        return redislock.lock.parse_info(c.execute_command("LOCK.INFO", name))


def extend_calls(direct: redis.Redis) -> int:
    return int(direct.info("commandstats").get("cmdstat_lock.extend", {}).get("calls", 0))


def wait_for(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)  # polling server state: no event a client can await


def test_locks_on_every_shard(rc: RedisCluster, cluster: Cluster) -> None:
    for name in names_on_every_node(rc):
        with rc.lock(name, timeout=10, lock_class=redislock.Lock) as lock:
            assert lock.fence > 0 and lock.owned()
            node = cluster_client(rc).get_node_from_key(name)
            direct = redis.Redis(host=node.host, port=node.port)
            try:
                assert direct.type(name) == b"redislock"
            finally:
                direct.close()
        assert not lock.locked()


def test_blocking_handoff_and_renewal_in_cluster(rc: RedisCluster, cluster: Cluster) -> None:
    name = "{job}:lock"
    holder = redislock.Lock(rc, name, lease=1.0)
    assert holder.acquire()
    got: List[Any] = []

    def wait() -> None:
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
    fence = holder.fence
    holder.release()
    t.join(10)
    assert got[0] is True and got[1] > fence


def needs_acquireall(cluster: Cluster) -> None:
    with cluster.nodes[0].client() as direct:
        if not redislock.supports(direct, "LOCK.ACQUIREALL"):
            pytest.skip("needs LOCK.ACQUIREALL, which this server's module does not have")


def multi(front: Front, client: Any, names: List[str], **kwargs: Any) -> Any:
    if front.kind == "sync":
        return redislock.MultiLock(client, names, **kwargs)
    return Driven(front, redislock.asyncio.MultiLock(client, names, **kwargs))


def test_every_term_lives_on_a_connection_of_its_own_to_the_node_of_its_key(
    front: Front, cluster: Cluster, rc: RedisCluster
) -> None:
    client = front.client()
    lost: List[str] = []
    lost_at: List[float] = []
    elections = []

    def on_lost(name: str) -> None:
        lost.append(name)
        lost_at.append(time.monotonic())

    for name in names_on_every_node(rc):
        election = front.election(client, name, lease=5, on_lost=lambda _, n=name: on_lost(n))
        term = election.campaign(5)
        node = cluster.master_of(key_slot(name.encode()))
        info = lock_info(node, name)
        assert info["fence"] == term and info["client"] != 0  # bound, on that node
        elections.append((name, election, node, info["client"]))
    name, first, node, bound = elections[0]
    candidate = first._lock._lock if isinstance(first, Driven) else first._lock
    next_renewal = candidate.local.hold.next_renew
    with node.client() as direct:
        direct.client_kill_filter(_id=str(bound))  # the server ends the term at once ...
    wait_for(lambda: lost == [name])  # ... and the candidate is told when its socket says so,
    assert lost_at[0] < next_renewal  # not when a renewal finds out
    assert not first.is_leader and lock_info(node, name) is None
    for name, election, node, _ in elections[1:]:
        assert election.is_leader and election.resign() is True
        assert lock_info(node, name) is None
    assert lost == [elections[0][0]]


def test_a_multi_lock_in_one_slot_waits_renews_and_replicates(front: Front, cluster: Cluster, rc: RedisCluster) -> None:
    needs_acquireall(cluster)
    master, replica = cluster.nodes[1], cluster.replicas[1][0]
    acknowledged(cluster, master)
    tag = name_on(cluster, master, f"multi-{front.kind}-")  # "{…}lock": the tag's slot is the master's
    names = [tag + ":a", tag + ":b", tag + ":c"]
    first = redislock.Lock(rc, names[1], timeout=10)
    assert first.acquire()
    lock = multi(front, front.client(), names, lease=0.9, replicas=1)
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(blocking_timeout=5)))
    t.start()
    wait_for(lambda: int(lock_info(master, names[1])["waiters"]) == 1)  # queued on the key's master
    first.release()
    t.join(10)
    assert got == [True]
    for name in names:
        assert lock_info(master, name)["fence"] == lock.fences[name]
    with replica.client(single_connection_client=True) as c:  # WAIT: on the replica at once
        c.execute_command("READONLY")
        assert all(c.execute_command("LOCK.INFO", n) is not None for n in names)
    time.sleep(1.5)  # more than a lease: held only if every key was renewed
    assert lock.owned() and all(lock_info(master, n)["token"] == lock.token for n in names)
    assert lock.release() == 3
    assert all(lock_info(master, n) is None for n in names)


def test_names_in_two_slots_are_a_cross_slot_error(front: Front, cluster: Cluster, rc: RedisCluster) -> None:
    needs_acquireall(cluster)
    names = ["acct:a", "acct:b"]
    assert key_slot(b"acct:a") != key_slot(b"acct:b")
    with pytest.raises(redislock.CrossSlotError, match="one Cluster slot"):
        multi(front, front.client(), names)  # refused before anything is sent
    # A client of one node (not a Cluster client): the server's CROSSSLOT, as the same error.
    node = cluster.master_of(key_slot(b"acct:a"))
    with node.client() as direct:
        with pytest.raises(redislock.CrossSlotError, match="CROSSSLOT"):
            redislock.MultiLock(direct, names, timeout=5).acquire(blocking=False)


def test_a_multi_lock_follows_a_slot_migration(front: Front, cluster: Cluster) -> None:
    needs_acquireall(cluster)
    source, target = cluster.nodes[0], cluster.nodes[1]
    tag = name_on(cluster, source, f"mmove-{front.kind}-")
    names = [tag + ":a", tag + ":b"]
    slot = key_slot(tag.encode())
    client = front.client()
    lost = threading.Event()
    holder = multi(front, client, names, lease=0.9, on_lost=lambda _: lost.set())
    assert holder.acquire(blocking=False)
    fences = dict(holder.fences)
    got: List[Any] = []
    waiter = multi(front, client, names, timeout=30)
    t = threading.Thread(target=lambda: got.append(waiter.acquire(blocking_timeout=15)))
    t.start()
    wait_for(lambda: lock_info(source, names[0])["waiters"] == 1)

    def while_split() -> None:
        # The keys are on the target, the slot still the source's (ASK): the wait is queued
        # again there, and the holder's renewals follow (a lease and a half, renewed).
        wait_for(lambda: (lock_info(target, names[0], asking=True) or {}).get("waiters") == 1)
        assert not lost.wait(1.35) and holder.owned()

    cluster.move_slot(slot, source, target, [n.encode() for n in names], between=while_split)
    assert not lost.wait(1.0)  # after SETSLOT … NODE: MOVED, and the renewals go on
    assert holder.release() == 2
    t.join(10)
    assert got == [True] and all(waiter.fences[n] > fences[n] for n in names)
    assert all(lock_info(target, n)["token"] == waiter.token for n in names)
    waiter.release()
    assert cluster.master_of(slot) is target


def test_a_slot_migration_is_followed(front: Front, cluster: Cluster) -> None:
    source = cluster.nodes[2]
    target = cluster.nodes[1]
    name = name_on(cluster, source, f"move-{front.kind}-")
    slot = key_slot(name.encode())
    client = front.client()
    holder = front.lock(client, name, timeout=30)
    assert holder.acquire(blocking=False)
    fence = holder.fence
    results: Dict[str, Any] = {}

    def wait(label: str, seconds: float) -> None:
        lock = front.lock(client, name, timeout=30, thread_local=False)
        started = time.monotonic()
        results[label] = (lock.acquire(blocking_timeout=seconds), time.monotonic() - started, lock)

    # Two waiters in the source's queue; the short one's wait ends during the move.
    patient = threading.Thread(target=wait, args=("patient", 15.0))
    patient.start()
    wait_for(lambda: lock_info(source, name)["waiters"] == 1)
    short = threading.Thread(target=wait, args=("short", 2.0))
    short.start()
    wait_for(lambda: lock_info(source, name)["waiters"] == 2)
    # The move comes a second into the short wait, which must not start its 2 s over on the
    # target (the scenario's timing, not a synchronisation).
    time.sleep(1.0)

    def while_split() -> None:
        # The record is on the target, the slot still the source's (ASK): the waiters were
        # sent again to the target, and every command of the holder follows.
        wait_for(lambda: (lock_info(target, name, asking=True) or {}).get("waiters") == 2)
        assert holder.owned() and holder.locked()
        assert holder.info()["fence"] == fence
        assert holder.extend(5)
        assert front.lock(client, name, timeout=5).acquire(blocking=False) is False
        short.join(10)

    cluster.move_slot(slot, source, target, [name.encode()], between=while_split)
    granted, took, _ = results["short"]
    assert granted is False and took < 2.0 + 0.6, "the re-queued wait outlived its timeout"
    # After SETSLOT … NODE: MOVED, and the client's slot table is refreshed.
    holder.release()
    patient.join(10)
    granted, took, waiter = results["patient"]
    assert granted is True and waiter.fence > fence
    assert lock_info(target, name)["fence"] == waiter.fence
    data = name.replace("lock", "data")  # the same slot (hash tag)
    assert waiter.call("SET", data, "x") is True and waiter.call("GET", data) == b"x"
    waiter.release()
    again = front.lock(client, name, timeout=5)
    assert again.acquire(blocking=False)
    again.release()
    assert cluster.master_of(slot) is target


def acknowledged(cluster: Cluster, master: Server) -> None:
    """A write of the master acknowledged by its replica (after a stop, the first can lag)."""
    key = name_on(cluster, master, "acked-")
    with master.client() as direct:
        deadline = time.monotonic() + 10
        while True:
            direct.set(key, 1)
            if direct.execute_command("WAIT", 1, 1000) == 1:
                return
            assert time.monotonic() < deadline, "the replica does not acknowledge"


def test_a_durable_grant_waits_on_the_node_that_granted_it(front: Front, cluster: Cluster) -> None:
    # WAIT goes on the connection of the grant, to the node serving the key: the grant is on
    # that node's replica when acquire returns, and with the replica stopped it is released.
    master, target = cluster.nodes[2], cluster.nodes[1]
    replica = cluster.replicas[2][0]
    acknowledged(cluster, master)
    name = name_on(cluster, master, f"durable-{front.kind}-")
    client = front.client()
    # Acknowledged grants and renewals: a generous timeout (a loaded machine).
    lock = front.lock(client, name, timeout=10, replicas=1, replicas_timeout=5)
    assert lock.acquire(blocking=False)
    with replica.client(single_connection_client=True) as c:
        c.execute_command("READONLY")
        info: Any = redislock.lock.parse_info(c.execute_command("LOCK.INFO", name))
        assert info["token"] == lock.token
    with replica.stopped():
        other = front.lock(client, name + ":other", timeout=10, replicas=1, replicas_timeout=0.25)
        with pytest.raises(redislock.NotReplicatedError):
            other.acquire(blocking=False)
        assert lock_info(master, name + ":other") is None
    acknowledged(cluster, master)
    # Through a slot migration: ASK while the slot is split, MOVED after; each WAIT on the
    # node that answered, whose replica acknowledges.
    slot = key_slot(name.encode())

    def while_split() -> None:
        assert lock.extend(5)  # ASK: ASKING, LOCK.EXTEND and WAIT on one connection to the target

    cluster.move_slot(slot, master, target, [name.encode()], between=while_split)
    assert lock.reacquire()  # MOVED: the slot table is read again
    assert lock_info(target, name)["token"] == lock.token
    lock.release()
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_failover_is_followed(front: Front, cluster: Cluster) -> None:
    master = cluster.nodes[0] if front.kind == "sync" else cluster.nodes[1]
    replica = cluster.replicas[cluster.nodes.index(master)][0]
    name = name_on(cluster, master, f"failover-{front.kind}-")
    client = front.client()
    renewed = front.lock(client, name, lease=6)  # renewed every 2 s, through the failover
    assert renewed.acquire(blocking=False)
    other = front.lock(client, name + ":plain", timeout=30)
    assert other.acquire(blocking=False)
    with master.client() as direct:
        assert direct.execute_command("WAIT", 1, 5000) == 1  # the replica has both holds
    master.kill()
    cluster.wait_promoted(replica)
    # The same client and lock objects: the topology is refreshed after the dead node's error.
    assert other.owned()
    other.release()
    assert other.acquire(blocking_timeout=5)
    other.release()
    with replica.client() as direct:
        calls = extend_calls(direct)
        wait_for(lambda: extend_calls(direct) > calls)  # a renewal on the promoted replica
    assert not renewed.lost.is_set() and renewed.owned()
    renewed.release()


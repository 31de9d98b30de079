"""The I/O of follow-ups (``Send.follow``): WAIT and WAITAOF sent on the connection that carried
a grant or a renewal, right after its reply.

Both commands count the acknowledgements of *their connection's* latest write, and a
connection that wrote nothing is answered at once: sent on another connection of a pool they
would report a grant as acknowledged that no replica has. So a request with follow-ups is one
exchange on one connection: the command, then each follow-up. On a single server that is a
connection of the lock's own (``_link.Link``) or of the application's client; on a Cluster a
connection of the lock's own to the node that serves the key (the cluster client would route
each command of the exchange on its own), with ``MOVED`` and ``ASK`` followed here.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, List, Optional, Tuple

from redis.exceptions import AskError, ConnectionError, MovedError, ResponseError

from ._flow import Follow, Followed, Send

#: How many redirects a request with follow-ups follows on a Cluster (redis-py's own TTL).
MAX_REDIRECTS = 16


def follow_on(follow: Optional[Follow], reply: Any, roundtrip: Callable[[List[Any], float], Any]) -> Tuple[Any, bool]:
    """``reply`` with the follow-ups' replies (``Followed``), each sent by ``roundtrip(args,
    bound)`` on the connection that gave ``reply``; and whether that connection is still fit
    for use (a follow-up that timed out or lost its connection leaves it in an unknown state:
    the rest are not sent)."""
    if follow is None:
        return reply, True
    if not follow.wanted(reply):
        return Followed(reply, None), True
    results: List[Any] = []
    for command in follow.commands:
        try:
            results.append(roundtrip(command, follow.bound))
        except ResponseError as err:
            results.append(err)
        except Exception as err:  # no answer: the flow counts it as not acknowledged
            results.append(err)
            return Followed(reply, results), False
    return Followed(reply, results), True


async def afollow_on(
    follow: Optional[Follow], reply: Any, roundtrip: Callable[[List[Any], float], Awaitable[Any]]
) -> Tuple[Any, bool]:
    """``follow_on`` for asyncio connections."""
    if follow is None:
        return reply, True
    if not follow.wanted(reply):
        return Followed(reply, None), True
    results: List[Any] = []
    for command in follow.commands:
        try:
            results.append(await roundtrip(command, follow.bound))
        except ResponseError as err:
            results.append(err)
        except Exception as err:
            results.append(err)
            return Followed(reply, results), False
    return Followed(reply, results), True


def routing_key(args: List[Any]) -> Any:
    """The key that routes a command: the first after ``numkeys`` for a multi-key command
    (``LOCK.ACQUIREALL``, ``LOCK.RELEASEALL``: every key is in one slot), else the first
    argument."""
    if str(args[0]).upper().endswith("ALL"):
        return args[2]
    return args[1]


def cluster_send(cluster: Any, req: Send, link_of: Callable[[Any], Any]) -> Any:
    """A request with follow-ups on a ``redis.RedisCluster``: on a connection of the lock's own
    (``link_of(pool)``) to the node serving the key in the client's slot table. ``MOVED``
    reloads the table and sends again, ``ASK`` sends ``ASKING`` and the command to the node
    named; a node that cannot be reached reloads the table and the error goes to the flow."""
    key = routing_key(req.args)
    ask: Optional[Any] = None
    for _ in range(MAX_REDIRECTS):
        node = ask if ask is not None else cluster.get_node_from_key(key)
        link = link_of(cluster.get_redis_connection(node).connection_pool)
        try:
            return link.call(req, asking=ask is not None)
        except MovedError:
            ask = None
            cluster.nodes_manager.initialize()
        except AskError as err:
            ask = cluster.get_node(host=err.host, port=err.port)
            if ask is None:
                cluster.nodes_manager.initialize()
                raise
        except (ConnectionError, OSError):
            _refresh(cluster.nodes_manager.initialize)
            raise
    raise ResponseError(f"{req.args[0]}: more than {MAX_REDIRECTS} redirects")


async def acluster_send(cluster: Any, req: Send, link_of: Callable[[Any, Any], Any]) -> Any:
    """``cluster_send`` for ``redis.asyncio.RedisCluster``: ``link_of(cluster, node)`` is the
    lock's own connections to a ``ClusterNode`` of ``cluster``."""
    key = routing_key(req.args)
    ask: Optional[Any] = None
    for _ in range(MAX_REDIRECTS):
        node = ask if ask is not None else cluster.get_node_from_key(key)
        link = link_of(cluster, node)
        try:
            return await link.call(req, asking=ask is not None)
        except MovedError:
            ask = None
            await cluster.nodes_manager.initialize()
        except AskError as err:
            ask = cluster.get_node(host=err.host, port=err.port)
            if ask is None:
                await cluster.nodes_manager.initialize()
                raise
        except (ConnectionError, OSError):
            try:
                await cluster.nodes_manager.initialize()
            except Exception:  # no node answers now: the next request tries again
                pass
            raise
    raise ResponseError(f"{req.args[0]}: more than {MAX_REDIRECTS} redirects")


def _refresh(initialize: Callable[[], Any]) -> None:
    try:
        initialize()
    except Exception:  # no node answers now: the next request tries again
        pass

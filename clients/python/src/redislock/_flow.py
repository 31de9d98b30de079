"""What a flow asks of its front end, and the two loops that carry flows out.

Each operation of a lock (acquire, release, extend, …) is a *flow*: a generator that yields the
requests it needs carried out — ``Send`` (one command, maybe with follow-ups on the same
connection) or ``Pause`` (a pause) — receives each reply (or has the error thrown into it) and
returns the operation's result. ``drive`` (blocking) and ``adrive`` (asyncio) run a flow with
the front end's ``carry``. See ``_core`` for the flows themselves.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Generator, List, Optional, Tuple, TypeVar, Union

T = TypeVar("T")


class Follow:
    """Commands sent on the connection that carried a request, right after its reply, when that
    reply says something was written (``wanted``): WAIT, WAITAOF, which count the
    acknowledgements of that connection's latest write (see ``_durable``). ``bound``: seconds
    each reply may take."""

    __slots__ = ("commands", "bound")

    def __init__(self, commands: List[List[Any]], bound: float) -> None:
        self.commands = commands
        self.bound = bound

    @staticmethod
    def wanted(reply: Any) -> bool:
        """A grant (not nil), or an EXTEND answered 1: something was written to wait for."""
        return reply is not None and reply != 0


class Followed:
    """The replies of a request with follow-ups: ``reply`` the command's, ``results`` each
    follow-up's reply or error, in order (None when none was sent: the reply wrote nothing;
    shorter than the follow-ups when the connection failed on the way)."""

    __slots__ = ("reply", "results")

    def __init__(self, reply: Any, results: Optional[List[Any]]) -> None:
        self.reply = reply
        self.results = results


def unwrap(reply: Any) -> Any:
    """The command's own reply of a request that may have had follow-ups."""
    return reply.reply if isinstance(reply, Followed) else reply


class Send:
    """Send ``args`` and give back the reply (or throw the error in).

    ``bound``: seconds the command may take at most, besides the client's own ``socket_timeout``
    (None: only that). ``idempotent``: it may be sent again on a fresh connection when a pooled
    one turns out closed. ``wait_until`` (a ``time.monotonic()`` moment): the command waits in
    the server, and ``BLOCK`` with the time left *when it is sent* is appended; it may read for
    that long. ``forever``: ``BLOCK 0`` was appended already, no bound at all. ``own``: the
    command is a bound hold's (``EPHEMERAL``: its grant, renewals, release), for the connection
    the front end opened for that hold (``_owned``). ``follow``: commands sent on the same connection right
    after the reply, when it says something was written; the reply is then a ``Followed``."""

    __slots__ = ("args", "bound", "idempotent", "wait_until", "forever", "own", "follow")

    def __init__(
        self,
        args: List[Any],
        bound: Optional[float] = None,
        idempotent: bool = True,
        wait_until: Optional[float] = None,
        forever: bool = False,
        own: bool = False,
        follow: Optional[Follow] = None,
    ) -> None:
        self.args = args
        self.bound = bound
        self.idempotent = idempotent
        self.wait_until = wait_until
        self.forever = forever
        self.own = own
        self.follow = follow


class Pause:
    """Wait ``seconds`` (polling a key that holds another type)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Request = Union[Send, Pause]
Flow = Generator[Request, Any, T]


def step(flow: Flow[Any], reply: Any = None, error: Optional[Exception] = None) -> Tuple[bool, Any]:
    """Moves ``flow`` on with a reply (or an error thrown in): (False, its next request) or
    (True, its result)."""
    try:
        return False, (flow.send(reply) if error is None else flow.throw(error))
    except StopIteration as stop:
        return True, stop.value


def drive(flow: Flow[T], carry: Callable[[Request], Any]) -> T:
    """Runs ``flow`` to its end, each request carried out by ``carry`` (blocking)."""
    done, value = step(flow)
    while not done:
        try:
            reply = carry(value)
        except Exception as err:  # the flow decides what an error means
            done, value = step(flow, error=err)
        else:
            done, value = step(flow, reply)
    result: T = value
    return result


async def adrive(flow: Flow[T], carry: Callable[[Request], Awaitable[Any]]) -> T:
    """``drive`` for asyncio: ``carry`` is a coroutine function. A cancellation is not thrown
    into the flow: it ends the operation where it stands."""
    done, value = step(flow)
    while not done:
        done, value = step(flow, *(await _attempt(carry(value))))
    result: T = value
    return result


async def _attempt(work: Awaitable[Any]) -> Tuple[Any, Optional[Exception]]:
    try:
        return await work, None
    except Exception as err:
        return None, err


def block_arg(wait_until: float, now: float) -> Optional[int]:
    """The ``BLOCK`` milliseconds of a wait sent at ``now``; None when no time is left."""
    left_ms = int((wait_until - now) * 1000)
    return left_ms if left_ms > 0 else None


class BlockLeft(int):
    """The ``BLOCK`` argument of a wait sent through a Cluster client, which sends a command
    again by itself after a redirect (MOVED, ASK, TRYAGAIN) or a failover: each time it is
    encoded it reads as the milliseconds left then (at least 1), so that the wait re-queued on
    the node now serving the key never outlives its timeout. (An encoder that reads the integer
    value directly sends the time left at the first send.)"""

    wait_until: float

    def __new__(cls, wait_until: float) -> "BlockLeft":
        left = max(1, int((wait_until - time.monotonic()) * 1000))
        value = super().__new__(cls, left)
        value.wait_until = wait_until
        return value

    def __repr__(self) -> str:
        return str(max(1, int((self.wait_until - time.monotonic()) * 1000)))

    __str__ = __repr__


__all__ = [
    "Send",
    "Pause",
    "Follow",
    "Followed",
    "unwrap",
    "Request",
    "Flow",
    "step",
    "drive",
    "adrive",
    "block_arg",
    "BlockLeft",
]

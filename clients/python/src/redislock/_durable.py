"""Durable grants, without I/O: what a lock made with ``replicas``, ``aof_local`` or
``aof_replicas`` asks of the server after a grant or a renewal, and what the answer means.

After a grant (direct or waited) and after every renewal, the lock sends ``WAIT numreplicas
timeout`` (and ``WAITAOF numlocal numreplicas timeout``) on the connection that carried the
grant or the renewal: both count the acknowledgements of that connection's latest write, and a
connection that wrote nothing is answered at once, so they must follow the write on its own
connection. The front ends carry such a request out as one exchange (``Send.follow``): the
command, then, when its reply says something was written, the follow-up commands on the same
connection, every reply given back together (``Followed``).

The decisions here: the follow-up command lines and their time bounds, whether the replies
count as acknowledged, and the error of a shortfall. A grant that is not acknowledged is
released and raises ``NotReplicatedError``; a renewal that is not acknowledged is not counted
by the lease clock (``_core.Hold.renewed``); an explicit ``extend()`` that is not acknowledged
raises ``NotReplicatedError`` and leaves the lease clock where it was.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from redis.exceptions import ConnectionError, LockError, ResponseError

from ._common import Number, UnsupportedError, as_str, lock_error, to_ms, unsupported
from ._flow import Flow, Follow, Followed, Send

__all__ = ["NotReplicatedError", "Durability", "check", "confirm"]

#: How long the acknowledgements of one grant or renewal may take by default (seconds).
DEFAULT_TIMEOUT = 1.0

#: How long after a WAIT's own timeout its answer may still come (one crossing of the network).
ANSWER_GRACE = 0.45


class NotReplicatedError(LockError):
    """Fewer replicas (or fsyncs) than asked acknowledged a grant or a renewal in time.

    After ``acquire()`` the grant has been released (``released`` says whether the server
    answered the release; if not, the hold ends with its lease). After ``extend()`` the hold is
    kept, but its lease clock was not moved. ``replicas`` and ``local`` are the counts the
    server reported (``None`` where the answer did not come), ``needed`` and ``needed_local``
    what the lock asked for."""

    def __init__(
        self,
        message: str,
        lock_name: Optional[str] = None,
        *,
        replicas: Optional[int] = None,
        needed: int = 0,
        local: Optional[int] = None,
        needed_local: int = 0,
        released: bool = False,
    ) -> None:
        try:
            super().__init__(message, lock_name=lock_name)
        except TypeError:  # redis-py before 5.1: no lock_name
            super().__init__(message)
        self.replicas = replicas
        self.needed = needed
        self.local = local
        self.needed_local = needed_local
        self.released = released


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number of replicas (0 or more), not {value!r}")
    return value


class Acks:
    """What the follow-ups' replies say: ``ok`` when every count asked for was reached."""

    __slots__ = ("ok", "replicas", "local", "error")

    def __init__(self, ok: bool, replicas: Optional[int], local: Optional[int], error: Optional[BaseException]) -> None:
        self.ok = ok
        self.replicas = replicas
        self.local = local
        self.error = error


class Durability:
    """The acknowledgements a lock asks for: ``replicas`` (WAIT), ``aof_local`` and
    ``aof_replicas`` (WAITAOF: the master's own fsync, and that many replicas' fsyncs), each
    within ``timeout_ms``."""

    def __init__(self, replicas: int, timeout_ms: int, aof_local: bool, aof_replicas: int) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.aof_local = aof_local
        self.aof_replicas = aof_replicas
        #: WAITAOF was found on the server, and appendonly on where ``aof_local`` needs it.
        self.checked = not self.aof

    @classmethod
    def make(
        cls, replicas: int, replicas_timeout: Number, aof_local: bool, aof_replicas: int
    ) -> Optional["Durability"]:
        """The lock's arguments checked; None when nothing is asked (no WAIT is ever sent)."""
        replicas = _count(replicas, "replicas")
        aof_replicas = _count(aof_replicas, "aof_replicas")
        timeout_ms = to_ms(replicas_timeout, "replicas_timeout")
        if not replicas and not aof_local and not aof_replicas:
            return None
        return cls(replicas, timeout_ms, bool(aof_local), aof_replicas)

    @property
    def aof(self) -> bool:
        """WAITAOF is asked for."""
        return self.aof_local or self.aof_replicas > 0

    def probe(self) -> List[Any]:
        """The command that checks, before the first grant, that the server can answer WAITAOF:
        ``WAITAOF numlocal 0 1`` is answered at once (in at most 1 ms) where it can, with an
        unknown command where WAITAOF does not exist (Redis before 7.2), and with an error where
        ``numlocal`` is asked and appendonly is off."""
        return ["WAITAOF", int(self.aof_local), 0, 1]

    def probe_failed(self, err: ResponseError, name: Any) -> Exception:
        text = str(err)
        if unsupported(err):
            return lock_error(
                UnsupportedError,
                "aof_local/aof_replicas need WAITAOF, which this server does not have "
                f"(Redis 7.2 or newer, Valkey 8 or newer): {text}",
                name,
            )
        if "appendonly" in text.lower():
            return lock_error(
                UnsupportedError, f"aof_local needs appendonly yes on the master: {text}", name
            )
        return err

    def follow(self, left: Optional[float] = None) -> Follow:
        """The follow-ups of a grant or a renewal: WAIT and/or WAITAOF, each waiting at most the
        lock's ``replicas_timeout``, and no longer than ``left`` seconds (the lease's time)."""
        timeout_ms = self.timeout_ms
        if left is not None:
            timeout_ms = max(1, min(timeout_ms, int(left * 1000)))  # never 0: that waits forever
        commands: List[List[Any]] = []
        if self.replicas:
            commands.append(["WAIT", self.replicas, timeout_ms])
        if self.aof:
            commands.append(["WAITAOF", int(self.aof_local), self.aof_replicas, timeout_ms])
        return Follow(commands, timeout_ms / 1000 + ANSWER_GRACE)

    def acks(self, reply: Any) -> Acks:
        """Whether the follow-ups' replies reach every count asked for. A follow-up that failed
        (no answer, a dropped connection, an error) counts as not acknowledged."""
        results: Sequence[Any] = reply.results if isinstance(reply, Followed) and reply.results else []
        replicas: Optional[int] = None
        local: Optional[int] = None
        error: Optional[BaseException] = None
        ok = len(results) == (1 if self.replicas else 0) + (1 if self.aof else 0)
        for result in results:
            if isinstance(result, BaseException):
                error = error or result
                ok = False
            elif isinstance(result, (list, tuple)):  # WAITAOF: [numlocal, numreplicas]
                local, aof_replicas = int(result[0]), int(result[1])
                ok = ok and local >= int(self.aof_local) and aof_replicas >= self.aof_replicas
                replicas = aof_replicas if replicas is None else min(replicas, aof_replicas)
            else:  # WAIT: the number of replicas
                replicas = int(result)
                ok = ok and replicas >= self.replicas
        return Acks(ok, replicas, local, error)

    def describe(self) -> str:
        parts = []
        if self.replicas:
            parts.append(f"{self.replicas} replica(s)")
        if self.aof_local:
            parts.append("the master's AOF fsync")
        if self.aof_replicas:
            parts.append(f"{self.aof_replicas} replica(s)' AOF fsync")
        return " and ".join(parts)

    def shortfall(self, acks: Acks, name: Any, what: str, released: bool = False) -> Exception:
        """The error of a grant (``what`` = "grant") or an extension not acknowledged in time;
        a WAITAOF the server refused keeps its own error, as ``UnsupportedError``."""
        err = acks.error
        if isinstance(err, ResponseError):
            refused = self.probe_failed(err, name)
            if refused is not err:
                return refused
        got = []
        if acks.replicas is not None:
            got.append(f"{acks.replicas} replica(s)")
        if acks.local is not None:
            got.append(f"local fsync {acks.local}")
        answer = ", ".join(got) if got else f"no answer ({err})" if err else "no answer"
        tail = " (released)" if what == "grant" and released else ""
        if what == "grant" and not released:
            tail = " (the release was not answered: the hold ends with its lease)"
        message = (
            f"the {what} of {as_str(name)!r} was not acknowledged by {self.describe()} within "
            f"{self.timeout_ms} ms: {answer}{tail}"
        )
        return NotReplicatedError(
            message,
            as_str(name),
            replicas=acks.replicas,
            needed=max(self.replicas, self.aof_replicas),
            local=acks.local,
            needed_local=int(self.aof_local),
            released=released,
        )


def check(durable: Durability, name: Any) -> Flow[None]:
    """Before the first grant of a lock that asks for WAITAOF: the server must have it (and
    appendonly on, for ``aof_local``), else ``UnsupportedError`` and nothing is taken. (A lock
    sends nothing when it is made, so this is the first moment the server can tell.)"""
    try:
        yield Send(durable.probe())
    except ResponseError as err:
        raise durable.probe_failed(err, name) from err
    durable.checked = True


def confirm(durable: Durability, name: Any, token: bytes, reply: Any) -> Flow[None]:
    """A grant's acknowledgements (``reply``: the grant with its follow-ups): enough, or the
    grant is released and ``NotReplicatedError`` (``UnsupportedError`` where the server refused
    WAITAOF) raised."""
    acks = durable.acks(reply)
    if acks.ok:
        return
    released = False
    try:
        yield Send(["LOCK.RELEASE", name, token], bound=max(durable.timeout_ms / 1000, 1.0))
        released = True
    except (ConnectionError, OSError, ResponseError):
        pass  # not answered: the hold ends with its lease
    raise durable.shortfall(acks, name, "grant", released)

"""What the sync and asyncio locks share: the command lines, reply parsing and errors."""

from __future__ import annotations

import math
import re
import uuid
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast, overload

if sys.version_info >= (3, 11):
    from typing import Literal, TypedDict
else:  # typing's TypedDict before 3.11 cannot be generic, which is not needed here
    from typing import Literal, TypedDict

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

__all__ = [
    "LockError",
    "LockNotOwnedError",
    "UnsupportedError",
    "StaleFenceError",
    "LockKindError",
    "LockInfo",
]

Number = Union[int, float]
EncodableT = Union[bytes, str, int, float, memoryview]

#: The lease of a lock created without ``timeout``: held until released, renewed every third.
DEFAULT_LEASE = 30.0

#: The most places a semaphore (``limit``) may have.
MAX_LIMIT = 1_000_000

#: The local clock counts every lease this much shorter than the server does (a share of the
#: lease plus a constant, as Redlock's clock drift): the two clocks may run at slightly
#: different rates, and the holder must be told of a loss before the server frees the lock.
CLOCK_DRIFT = 0.01
CLOCK_SLACK = 0.002


def lease_end(sent: float, ttl_ms: int) -> float:
    """The conservative local end (``time.monotonic()`` seconds) of a lease of ``ttl_ms`` set by
    a request sent at ``sent``: the server started it no earlier than that moment."""
    ttl = ttl_ms / 1000
    return sent + ttl - ttl * CLOCK_DRIFT - CLOCK_SLACK


def renew_at_once(sent: float, received: float, ttl_ms: int) -> bool:
    """True when a grant's reply came so long after its request (a wait in the server) that the
    lease counted from the request would be short: the lock renews it at once."""
    return received - sent > ttl_ms / 10000


def wrong_type(err: ResponseError) -> bool:
    """The key holds another type: a plain string of redis-py's own Lock, say."""
    return str(err).startswith("WRONGTYPE")


class UnsupportedError(LockError):
    """The server's redislock does not know this command or option (yet)."""


class StaleFenceError(LockError):
    """LOCK.FENCE refused the command: a newer fence has already passed the gate."""

    def __init__(self, message: str, fence: Optional[int] = None, highest: Optional[int] = None):
        super().__init__(message)
        self.fence = fence
        self.highest = highest


class LockKindError(LockError):
    """The request does not fit the key: it is a semaphore with another ``limit`` (``limit`` is
    then the key's), ``limit`` was asked of a read/write lock (exclusive or ``shared`` holds), or
    this token already holds the key in the other mode (``other_mode``). Nothing was changed."""

    def __init__(
        self,
        message: str,
        limit: Optional[int] = None,
        other_mode: bool = False,
        lock_name: Optional[str] = None,
    ) -> None:
        named: Dict[str, Any] = {"lock_name": lock_name}
        try:
            super().__init__(message, **named)
        except TypeError:  # redis-py before 5.1: no lock_name
            super().__init__(message)
        self.limit = limit
        self.other_mode = other_mode


def new_token() -> bytes:
    """A random owner token: 128 bits as 32 hex characters, like the server's own `*`."""
    return uuid.uuid4().hex.encode()


def to_ms(seconds: Number, what: str) -> int:
    """Seconds (int or float) to whole milliseconds, at least 1."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a positive number of seconds, not {seconds!r}")
    return max(1, int(math.ceil(seconds * 1000)))


def mode_args(shared: bool, limit: Optional[int], ephemeral: bool) -> List[EncodableT]:
    """The wave-2 options of LOCK.ACQUIRE, as given."""
    if shared and limit is not None:
        raise ValueError("shared and limit exclude each other")
    args: List[EncodableT] = []
    if shared:
        args.append("SHARED")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
        args += ["LIMIT", limit]
    if ephemeral:
        args.append("EPHEMERAL")
    return args


def acquire_args(
    name: Any, token: bytes, ttl_ms: int, mode: Sequence[EncodableT], block_ms: Optional[int]
) -> List[Any]:
    args: List[Any] = ["LOCK.ACQUIRE", name, token, "PX", ttl_ms, *mode]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    return args


def block_ms(blocking: bool, blocking_timeout: Optional[Number]) -> Optional[int]:
    """The BLOCK argument for redis-py's (blocking, blocking_timeout): None means do not wait."""
    if not blocking:
        return None
    if blocking_timeout is None:
        return 0  # wait without limit
    if blocking_timeout <= 0:
        return None
    return to_ms(blocking_timeout, "blocking_timeout")


def parse_grant(reply: Any) -> Optional[Tuple[bytes, int]]:
    if reply is None:
        return None
    if not isinstance(reply, (list, tuple)) or len(reply) != 2:
        raise LockError(f"unexpected LOCK.ACQUIRE reply: {reply!r}")
    token, fence = reply
    return as_bytes(token), int(fence)


def as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, memoryview):
        return value.tobytes()
    return str(value).encode()


def as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HolderInfo(TypedDict, total=False):
    """One holder in ``LockInfo["holders"]``."""

    token: bytes
    fence: int
    ttl: int
    client: int
    data: bytes


class LockInfo(Dict[str, Any]):
    """LOCK.INFO as a dict with str keys, typed per key (``info["fence"]`` is an ``int``).

    Every kind: ``mode`` (``"exclusive"``, ``"shared"`` or ``"semaphore"``), ``ttl`` (ms, the
    key's: the latest lease), ``waiters``, and ``holders``: a list of ``HolderInfo`` dicts
    (``token`` as bytes, ``fence``, ``ttl``, ``client``), one per holder, in grant order. An
    exclusive lock also has ``token``, ``fence`` and ``client`` at the top; a semaphore has
    ``limit``. Servers before shared locks have no ``holders``: ``tokens`` and ``holder()`` work
    on both."""

    @overload
    def __getitem__(self, key: Literal["mode"]) -> str: ...
    @overload
    def __getitem__(self, key: Literal["ttl", "waiters", "fence", "client", "limit"]) -> int: ...
    @overload
    def __getitem__(self, key: Literal["token", "data"]) -> bytes: ...
    @overload
    def __getitem__(self, key: Literal["holders"]) -> List[HolderInfo]: ...
    @overload
    def __getitem__(self, key: str) -> Any: ...

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(key)

    @property
    def tokens(self) -> List[bytes]:
        """Every holder's token: the owner of an exclusive lock, or each holder's."""
        holders = self.get("holders")
        if holders:
            return [as_bytes(h.get("token")) for h in holders]
        token = self.get("token")
        return [as_bytes(token)] if token is not None else []

    def holder(self, token: Union[bytes, str, None]) -> Optional[HolderInfo]:
        """The entry of ``token``'s hold (``token``, ``fence``, ``ttl``, …), or None."""
        if token is None:
            return None
        token = as_bytes(token)
        holders: List[HolderInfo] = self.get("holders") or []
        if holders:
            return next((h for h in holders if h.get("token") == token), None)
        if self.get("token") == token:
            return cast(HolderInfo, {k: self[k] for k in ("token", "fence", "ttl", "client") if k in self})
        return None


def _pairs(reply: Any) -> Dict[str, Any]:
    if isinstance(reply, dict):
        items = list(reply.items())
    else:
        items = [(reply[i], reply[i + 1]) for i in range(0, len(reply) - 1, 2)]
    return {as_str(k): v for k, v in items}


def parse_info(reply: Any) -> Optional[LockInfo]:
    """LOCK.INFO under RESP2 (a flat list) or RESP3 (a map), bytes or decoded."""
    if reply is None:
        return None
    fields = _pairs(reply)
    info = LockInfo()
    for key, value in fields.items():
        if key == "token":
            info[key] = as_bytes(value)
        elif key == "holders" and isinstance(value, (list, tuple)):
            holders = []
            for h in value:
                holder = _pairs(h)
                if "token" in holder:
                    holder["token"] = as_bytes(holder["token"])
                holders.append(holder)
            info[key] = holders
        elif key == "mode":
            info[key] = as_str(value)
        else:
            info[key] = value
    return info


def holder_ttl(info: LockInfo, token: bytes) -> Optional[int]:
    """Remaining ms of ``token``'s hold, or None if it holds nothing."""
    holder = info.holder(token)
    return None if holder is None else int(holder.get("ttl", -1))


def unsupported(err: ResponseError) -> bool:
    """An error that says the server does not know a command or an option."""
    text = str(err).lower()
    return "unknown command" in text or "unknown option" in text or "unknown subcommand" in text


def lock_error(cls: Callable[..., Exception], message: str, name: Any) -> Exception:
    """``cls(message, lock_name=name)`` where redis-py's LockError takes a name (5.1 and newer)."""
    try:
        return cls(message, lock_name=as_str(name))
    except TypeError:
        return cls(message)


# The server's answers to a request that does not fit the key (src/core/errors.rs); redis-py
# drops the leading "ERR ".
_KIND_MISMATCH = re.compile(
    r"^(?:ERR )?(?:the key is a semaphore with LIMIT (\d+):"
    r"|the key is a read/write lock \(exclusive or SHARED holds\), not a semaphore"
    r"|(this token already holds the key in another mode))"
)


def translate(err: ResponseError, name: Any, what: str) -> Exception:
    """A server error as the exception the lock raises."""
    text = str(err)
    if unsupported(err):
        return lock_error(UnsupportedError, f"{what} is not supported by this server: {text}", name)
    kind = _KIND_MISMATCH.match(text)
    if kind:
        return LockKindError(
            text,
            limit=int(kind.group(1)) if kind.group(1) else None,
            other_mode=kind.group(2) is not None,
            lock_name=as_str(name),
        )
    if text.startswith("NOTOWNER") or (wrong_type(err) and what != "acquire"):
        # WRONGTYPE: the key is not a lock of this module (a plain SET, redis-py's own Lock),
        # so this token holds nothing there, which redis-py's Lock reports the same way.
        return lock_error(LockNotOwnedError, f"Cannot {what}: {text}", name)
    if text.startswith("STALEFENCE"):
        words = text.split()
        numbers = [int(w) for w in words if w.isdigit()]
        return StaleFenceError(
            text,
            fence=numbers[0] if numbers else None,
            highest=numbers[-1] if len(numbers) > 1 else None,
        )
    return err

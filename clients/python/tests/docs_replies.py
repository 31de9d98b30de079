"""Replies as redis-cli prints them, and the page's lines compared with them.

A small RESP client keeps the kinds of replies apart (`Conn`); `tty()` prints a reply the way
redis-cli does on a terminal (cliFormatReplyTTY: nested arrays and maps, a map value that spans
lines starting on a line of its own; trailing spaces, which redis-cli leaves after `=>`, are not
compared); test_docs_printer.py checks it against the real redis-cli.

`compare()` wants each line shown equal to the line printed. Where they differ, a fence (an
integer of 13 to 19 digits) or a remaining time (`PTTL`, or a `ttl` field; within 3 s) may stand
for what the server answered, on a page that tells the reader so (`varies`): the same fence shown
twice must be the same fence twice, two different ones must differ.
"""

from __future__ import annotations

import re
import socket
from typing import Any, Dict, List

# --- a small RESP client that keeps the kinds of replies apart ----------------------------------


class Err(str):
    pass


class Simple(str):
    pass


class Map(List[Any]):
    """RESP3 map, as a list of (key, value)."""


class Set(List[Any]):
    """RESP3 set."""


class Push(List[Any]):
    """RESP3 push message."""


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.file = self.sock.makefile("rb")
        self.waiting = False

    def send(self, args: List[str]) -> None:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))

    def read(self) -> Any:
        line = self.file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed")
        kind, body = line[:1], line[1:-2].decode()
        if kind == b"+":
            return Simple(body)
        if kind == b"-":
            return Err(body)
        if kind == b":":
            return int(body)
        if kind in (b"$", b"="):
            n = int(body)
            if n < 0:
                return None
            data = self.file.read(n + 2)[:-2]
            return data if kind == b"$" else data[4:]
        if kind == b"_":
            return None
        if kind == b",":
            return float(body)
        if kind == b"#":
            return body == "t"
        if kind in (b"*", b"~", b">"):
            n = int(body)
            if n < 0:
                return None
            items = [self.read() for _ in range(n)]
            return Set(items) if kind == b"~" else Push(items) if kind == b">" else items
        if kind == b"%":
            return Map((self.read(), self.read()) for _ in range(int(body)))
        if kind == b"|":
            for _ in range(int(body)):
                self.read(), self.read()
            return self.read()
        raise ConnectionError(f"unexpected reply {line!r}")

    def call(self, args: List[str]) -> Any:
        self.send(args)
        return self.read()

    def close(self) -> None:
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass


# --- printing replies the way redis-cli does -----------------------------------------------------


def quote(b: bytes) -> str:
    """A bulk string as redis-cli shows it (sdscatrepr)."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\a": "\\a", "\b": "\\b"}
    out = ['"']
    for c in b:
        ch = chr(c)
        if ch in escapes:
            out.append(escapes[ch])
        elif 32 <= c < 127:
            out.append(ch)
        else:
            out.append("\\x%02x" % c)
    out.append('"')
    return "".join(out)


def multiline(reply: Any) -> bool:
    """Whether redis-cli prints `reply` on more than one line (cliIsMultilineValueTTY)."""
    if isinstance(reply, Map):
        return len(reply) > 1 or (len(reply) == 1 and multiline(reply[0][1]))
    if isinstance(reply, list):
        return len(reply) > 1 or (len(reply) == 1 and multiline(reply[0]))
    return False


EMPTY = {Map: "(empty hash)", Set: "(empty set)", Push: "(empty push)", list: "(empty array)"}


def tty(reply: Any, prefix: str = "") -> str:
    """`reply` as redis-cli prints it on a terminal (cliFormatReplyTTY)."""
    if isinstance(reply, Err):
        return f"(error) {reply}\n"
    if isinstance(reply, Simple):
        return f"{reply}\n"
    if isinstance(reply, bool):
        return f"({'true' if reply else 'false'})\n"
    if isinstance(reply, int):
        return f"(integer) {reply}\n"
    if isinstance(reply, float):
        return f"(double) {reply}\n"
    if reply is None:
        return "(nil)\n"
    if isinstance(reply, bytes):
        return quote(reply) + "\n"
    if isinstance(reply, list):
        if not reply:
            return EMPTY[type(reply)] + "\n"
        # The index column is as wide as the largest index; nested replies are indented past it.
        width = len(str(len(reply)))
        inner = prefix + " " * (width + 2)
        sep = "#" if isinstance(reply, Map) else "~" if isinstance(reply, Set) else ")"
        out = ""
        for i, item in enumerate(reply):
            out += f"{'' if i == 0 else prefix}{i + 1:>{width}}{sep} "
            if isinstance(reply, Map):
                k, v = item
                out += tty(k, inner).rstrip("\n") + " => "
                if multiline(v):
                    # A value on several lines starts on a line of its own.
                    out += "\n" + inner
                out += tty(v, inner)
            else:
                out += tty(item, inner)
        return out
    raise TypeError(reply)


# Redis 7.2 and newer and Valkey word ACL refusals differently from Redis 7.0 (they name the user);
# the pages show Redis 7.0's words, and docs/operations.md quotes the others beside them.
NEWER_WORDING = [
    (re.compile(r"^NOPERM User \S+ has no permissions to run the '(.*)' command$"),
     r"NOPERM this user has no permissions to run the '\1' command"),
    (re.compile(r"^NOPERM No permissions to access a key$"),
     "NOPERM this user has no permissions to access one of the keys used as arguments"),
]


def render(command: List[str], reply: Any) -> List[str]:
    if isinstance(reply, Err):
        for pattern, words in NEWER_WORDING:
            reply = Err(pattern.sub(words, reply))
    if command and command[0].upper() == "INFO" and isinstance(reply, bytes):
        return reply.decode().replace("\r", "").rstrip("\n").split("\n")
    return tty(reply).rstrip("\n").split("\n")


# --- matching what the page shows with what the server answered ----------------------------------

FENCE = re.compile(r"(?<!\d)\d{13,19}(?!\d)")  # a bigint too, as Node.js prints it: 61727…n


class Bindings:
    """Fence shown → fence answered, one to one."""

    def __init__(self) -> None:
        self.real: Dict[str, str] = {}
        self.doc: Dict[str, str] = {}

    def bind(self, doc: str, real: str, where: str) -> None:
        if doc in self.real:
            assert self.real[doc] == real, (
                f"{where}: the page shows {doc} again, but the server answered {real} "
                f"where it answered {self.real[doc]} before"
            )
            return
        assert real not in self.doc, (
            f"{where}: the page shows two different values ({self.doc.get(real)} and {doc}) "
            f"where the server answered {real} both times"
        )
        self.real[doc] = real
        self.doc[real] = doc


def match_line(doc: str, real: str, ttl: bool, bindings: Bindings, where: str) -> bool:
    """Whether `real` is `doc` but for fences and (on a `ttl` line) a remaining time."""
    if ttl:
        m_doc = re.fullmatch(r"(.*\(integer\) )(-?\d+)", doc)
        m_real = re.fullmatch(r"(.*\(integer\) )(-?\d+)", real)
        if m_doc and m_real and m_doc.group(1) == m_real.group(1):
            d, r = int(m_doc.group(2)), int(m_real.group(2))
            return d == r or (d > 0 and r > 0 and abs(d - r) <= 3000)
    parts = FENCE.split(doc)
    values = FENCE.findall(doc)
    pattern = "".join(
        re.escape(p) + (r"(\d{13,19})" if i < len(values) else "") for i, p in enumerate(parts)
    )
    m = re.fullmatch(pattern, real)
    if not m:
        return False
    for doc_value, real_value in zip(values, m.groups()):
        bindings.bind(doc_value, real_value, where)
    return True


def compare_lines(expected: List[str], got: List[str], ttl_lines: List[bool], bindings: Bindings,
                  varies: bool, where: str, what: str) -> None:
    """`got` must equal `expected` line by line; where a line differs, `match_line` decides,
    and only on a page that says what varies."""
    got = [line.rstrip() for line in got]
    expected = [line.rstrip() for line in expected]
    ok = len(got) == len(expected)
    unsaid = False
    if ok:
        for i, (d, r) in enumerate(zip(expected, got)):
            if d == r:
                continue
            if not match_line(d, r, ttl_lines[i], bindings, where):
                ok = False
                break
            unsaid = unsaid or not varies
    assert ok, (
        f"{where}: {what}\n--- the page shows ---\n" + "\n".join(expected)
        + "\n--- the server answered ---\n" + "\n".join(got)
    )
    assert not unsaid, (
        f"{where}: {what}: a fence or a remaining time differs from the page's, and the page does "
        f"not tell the reader that they differ on every run"
    )


def without_builtin_modules(command: List[str], reply: Any) -> Any:
    """MODULE LIST with only this module: the manual does not show the modules newer servers
    carry inside themselves (Redis 8's vectorset, Valkey 9's lua)."""
    if [a.upper() for a in command] != ["MODULE", "LIST"] or not isinstance(reply, list):
        return reply

    def name(entry: Any) -> Any:
        fields = dict(zip(entry[::2], entry[1::2])) if isinstance(entry, list) else entry
        return fields.get(b"name", fields.get("name")) if isinstance(fields, dict) else None

    return [entry for entry in reply if name(entry) in (b"redislock", "redislock")]


def compare(expected: List[str], command: List[str], reply: Any, bindings: Bindings,
            varies: bool, where: str) -> None:
    got = render(command, reply)
    name = command[0].upper() if command else ""
    ttl_lines = [
        name in ("PTTL", "TTL") or (i > 0 and expected[i - 1].rstrip().endswith('"ttl"'))
        or '"ttl" =>' in d
        for i, d in enumerate(expected)
    ]
    ttl_lines += [False] * max(0, len(got) - len(ttl_lines))
    compare_lines(expected, got, ttl_lines, bindings, varies, where, " ".join(command))

"""The manual's examples, checked against a real server.

- Every fenced block of README.md and docs/*.md with `name> command` lines is a redis-cli
  transcript: the commands are sent to a server with the module (one server per page, blocks in
  order, one connection per prompt name), and each reply, printed the way redis-cli prints it,
  must equal the lines shown. Values that differ from run to run are matched, not compared:
  a 32-hex-character token or a fence (an integer of 10 digits or more) shown in the page stands
  for whatever the server answered in its place, consistently through the page (the same value
  shown twice must be the same value twice, two different ones must differ, and later commands
  get the real value); a TTL (`PTTL`, or the `ttl` field of LOCK.INFO) may differ by up to 3 s.
- HTML comments before a block steer the replay: `<!-- replay: resp3 -->` (the block speaks
  RESP3), `<!-- replay: server=bare -->` (a server without the module, where the block may load
  it; `/path/to/libredislock.so` stands for the module), `<!-- replay: reply B -->` (the block
  is the reply to client B's command that was left waiting: a command followed directly by
  another prompt is sent without reading its reply).
- A block after `<!-- example: PATH#NAME -->` must equal the region between `docs:begin NAME`
  and `docs:end NAME` in PATH (dedented); the tests of that language run PATH.
- Every block of code (python, js, ts, rust, java) is either such an example or marked
  `<!-- not-run: reason -->`.
- Replies are printed by `tty()`, which follows redis-cli's own formatting rules (nested arrays and
  maps, and a map value that spans lines starting on a line of its own); trailing spaces, which
  redis-cli leaves after `=>` there, are not compared. `test_replies_print_as_redis_cli_prints_them`
  checks `tty()` against the real redis-cli (or valkey-cli) where one is installed.
"""

from __future__ import annotations

import re
import select
import shlex
import shutil
import socket
import subprocess
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from servers import REPO, Server, module_path, server_binary

PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
DOC_MODULE_PATH = "/path/to/libredislock.so"
PROMPT = re.compile(r"^([A-Za-z][\w-]*)> (.*)$")
CODE_LANGS = {"python", "py", "js", "javascript", "ts", "typescript", "rust", "java", "sh-session"}


# --- the pages ----------------------------------------------------------------------------------


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: List[str]
    directives: List[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def directive(self, kind: str) -> Optional[str]:
        for d in self.directives:
            if d.startswith(kind + ":"):
                return d[len(kind) + 1 :].strip()
        return None

    @property
    def is_transcript(self) -> bool:
        return any(PROMPT.match(l) for l in self.lines) or self.directive("replay") is not None


def blocks(page: Path) -> List[Block]:
    found: List[Block] = []
    pending: List[str] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        comment = re.match(r"^<!--\s*(.*?)\s*-->\s*$", line)
        if comment:
            pending.append(comment.group(1))
        elif line.startswith("```"):
            lang = line[3:].strip()
            start = i
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            found.append(Block(page, start + 1, lang, body, pending))
            pending = []
        elif line.strip():
            pending = []
        i += 1
    return found


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

VARIABLE = re.compile(r"\b[0-9a-f]{32}\b|\b\d{10,}\b")


class Bindings:
    """Doc value → real value, one to one, for tokens and fences."""

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

    def substitute(self, text: str) -> str:
        return VARIABLE.sub(lambda m: self.real.get(m.group(0), m.group(0)), text)


def match_line(doc: str, real: str, ttl: bool, bindings: Bindings, where: str) -> bool:
    real = real.replace(module_path(), DOC_MODULE_PATH)
    if ttl:
        m_doc = re.fullmatch(r"(.*\(integer\) )(-?\d+)", doc)
        m_real = re.fullmatch(r"(.*\(integer\) )(-?\d+)", real)
        if m_doc and m_real and m_doc.group(1) == m_real.group(1):
            d, r = int(m_doc.group(2)), int(m_real.group(2))
            return d == r or (d > 0 and r > 0 and abs(d - r) <= 3000)
    parts = VARIABLE.split(doc)
    values = VARIABLE.findall(doc)
    pattern = "".join(
        re.escape(p) + (f"({'[0-9a-f]{32}' if len(values[i]) == 32 and not values[i].isdigit() else '[0-9]+'})" if i < len(values) else "")
        for i, p in enumerate(parts)
    )
    m = re.fullmatch(pattern, real)
    if not m:
        return False
    for doc_value, real_value in zip(values, m.groups()):
        bindings.bind(doc_value, real_value, where)
    return True


def without_builtin_modules(command: List[str], reply: Any) -> Any:
    """MODULE LIST with only this module: the manual does not show the modules newer servers
    carry inside themselves (Redis 8's vectorset, Valkey 9's lua)."""
    if [a.upper() for a in command] != ["MODULE", "LIST"] or not isinstance(reply, list):
        return reply

    def name(entry: Any) -> Any:
        fields = dict(zip(entry[::2], entry[1::2])) if isinstance(entry, list) else entry
        return fields.get(b"name", fields.get("name")) if isinstance(fields, dict) else None

    return [entry for entry in reply if name(entry) in (b"redislock", "redislock")]


def compare(expected: List[str], command: List[str], reply: Any, bindings: Bindings, where: str) -> None:
    got = [line.rstrip() for line in render(command, reply)]
    expected = [line.rstrip() for line in expected]
    name = command[0].upper() if command else ""
    ok = len(got) == len(expected)
    if ok:
        for i, (d, r) in enumerate(zip(expected, got)):
            ttl = name in ("PTTL", "TTL") or (i > 0 and expected[i - 1].endswith('"ttl"')) or '"ttl" =>' in d
            if not match_line(d, r, ttl, bindings, where):
                ok = False
                break
    assert ok, (
        f"{where}: {' '.join(command)}\n--- the page shows ---\n" + "\n".join(expected)
        + "\n--- the server answered ---\n" + "\n".join(got)
    )


# --- replaying a page ------------------------------------------------------------------------------


class Replay:
    def __init__(self, page: Path) -> None:
        self.page = page
        self.servers: Dict[str, Server] = {}
        self.conns: Dict[Tuple[str, str], Conn] = {}
        self.ids: Dict[Tuple[str, str], int] = {}
        self.bindings = Bindings()

    def server(self, kind: str) -> Server:
        if kind not in self.servers:
            if kind == "bare":
                self.servers[kind] = Server(module=False, extra=["--enable-module-command", "yes"])
            else:
                self.servers[kind] = Server()
        return self.servers[kind]

    def conn(self, kind: str, name: str) -> Conn:
        key = (kind, name)
        if key not in self.conns:
            c = Conn(self.server(kind).port)
            self.ids[key] = c.call(["CLIENT", "ID"])
            self.conns[key] = c
        return self.conns[key]

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        for s in self.servers.values():
            s.stop()

    def wait_blocked(self, kind: str, name: str) -> None:
        """Until the server has the waiting command: blocked, or its reply ready to read."""
        conn = self.conns[(kind, name)]
        control = self.conn(kind, "__control__")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._readable(conn):
                return
            listing = control.call(["CLIENT", "LIST", "ID", str(self.ids[(kind, name)])])
            text = listing.decode() if isinstance(listing, bytes) else str(listing)
            if re.search(r"flags=\S*b", text):
                return
            time.sleep(0.002)  # polling server state: a block has no event a client can await
        raise AssertionError(f"{self.page}: client {name}'s command neither blocked nor answered")

    @staticmethod
    def _readable(conn: Conn) -> bool:
        readable, _, _ = select.select([conn.sock], [], [], 0)
        return bool(readable)

    def run_block(self, block: Block) -> None:
        kind = "bare" if block.directive("replay") == "server=bare" else "module"
        resp3 = block.directive("replay") == "resp3"
        reply_to = block.directive("replay") or ""
        if reply_to.startswith("reply "):
            name = reply_to.split()[1]
            conn = self.conns[(kind, name)]
            assert conn.waiting, f"{block.where}: client {name} has no command waiting"
            conn.waiting = False
            compare(block.lines, ["(waiting command)"], conn.read(), self.bindings, block.where)
            return
        steps: List[Tuple[str, List[str], List[str]]] = []
        for line in block.lines:
            m = PROMPT.match(line)
            if m:
                steps.append((m.group(1), shlex.split(m.group(2)), []))
            else:
                assert steps, f"{block.where}: reply lines before any command"
                steps[-1][2].append(line)
        used = {name for name, _, _ in steps}
        if resp3:
            for name in used:
                assert self.conn(kind, name).call(["HELLO", "3"]) is not None
        try:
            for name, args, expected in steps:
                conn = self.conn(kind, name)
                assert not conn.waiting, f"{block.where}: client {name} is still waiting"
                args = [self.bindings.substitute(a).replace(DOC_MODULE_PATH, module_path()) for a in args]
                conn.send(args)
                if not expected:
                    conn.waiting = True
                    self.wait_blocked(kind, name)
                    continue
                compare(expected, args, without_builtin_modules(args, conn.read()), self.bindings, block.where)
        finally:
            if resp3:
                for name in used:
                    if not self.conn(kind, name).waiting:
                        self.conn(kind, name).call(["HELLO", "2"])


def transcript_pages() -> List[Path]:
    return [p for p in PAGES if any(b.is_transcript for b in blocks(p))]


@pytest.mark.parametrize("page", transcript_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_redis_cli_examples(page: Path) -> None:
    replay = Replay(page)
    try:
        for block in blocks(page):
            if block.is_transcript:
                replay.run_block(block)
        waiting = [name for (_, name), c in replay.conns.items() if c.waiting]
        assert not waiting, f"{page}: commands of {waiting} never got their reply shown"
    finally:
        replay.close()


def region(path: Path, name: str) -> str:
    lines, inside, found = [], False, False
    for line in path.read_text().splitlines():
        if re.search(rf"docs:begin {re.escape(name)}\b", line):
            inside = found = True
            continue
        if re.search(rf"docs:end {re.escape(name)}\b", line):
            inside = False
            continue
        if inside:
            lines.append(line)
    assert found, f"no region {name} in {path}"
    return textwrap.dedent("\n".join(lines)).strip("\n")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_code_examples_are_files_that_tests_run(page: Path) -> None:
    for block in blocks(page):
        example = block.directive("example")
        if example:
            path, _, name = example.partition("#")
            file = REPO / path
            assert file.is_file(), f"{block.where}: no file {path}"
            want = region(file, name) if name else file.read_text().strip("\n")
            got = "\n".join(block.lines).strip("\n")
            assert got == want, f"{block.where}: the block differs from {example}; copy it again"
        elif block.lang.lower() in CODE_LANGS:
            assert block.directive("not-run"), (
                f"{block.where}: a {block.lang} block must be an example file "
                "(<!-- example: PATH#REGION -->) or say why it is not run (<!-- not-run: … -->)"
            )


def test_every_command_and_option_is_documented() -> None:
    text = (REPO / "docs" / "commands.md").read_text()
    for word in ["LOCK.ACQUIRE", "LOCK.RELEASE", "LOCK.EXTEND", "LOCK.INFO", "BLOCK", "EX seconds",
                 "PX milliseconds", "SHARED", "LIMIT count", "EPHEMERAL", "LOCK.CALL", "LOCK.FENCE",
                 "LOCK._APPLY", "LOCK._HOLD", "LOCK._GATE", "LOCK._EPOCH", '"holders"']:
        assert word in text, word
    ops = (REPO / "docs" / "operations.md").read_text()
    for word in ["redislock.max-ttl", "redislock.max-block", "INFO redislock", "lock.acquired",
                 "lock.handoff", "lock.expired", "lease_ends", "LOCK._HOLD", "ACL"]:
        assert word in ops, word
    # Every error line the module can send (src/core/errors.rs) is in commands.md, with an
    # example value where the line has one.
    errors = (REPO / "src" / "core" / "errors.rs").read_text()
    lines = re.findall(r'f\.write_str\("([^"]+)"\)', errors) + re.findall(r'write!\(f, "([^"]+)"', errors)
    assert len(lines) > 30
    for line in lines:
        pattern = r"\S+?".join(re.escape(part) for part in re.split(r"\{[^}]*\}", line))
        assert re.search(pattern, text), f"docs/commands.md does not list the error {line!r}"


# --- the printer against the real redis-cli -------------------------------------------------------


def cli_binary() -> Optional[str]:
    """redis-cli, or the valkey-cli next to the valkey-server under test."""
    server = Path(shutil.which(server_binary()) or server_binary())
    for name in ("valkey-cli", "redis-cli"):
        if (server.parent / name).is_file():
            return str(server.parent / name)
    return shutil.which("redis-cli") or shutil.which("valkey-cli")


# Replies of every shape the pages show: flat and nested arrays, maps (RESP3) with values on one
# line and on several, sets, empty aggregates, nil, errors, integers.
CLI_SETUP = [
    ["LOCK.ACQUIRE", "lock:e", "worker-1", "PX", "60000"],
    ["LOCK.ACQUIRE", "lock:s", "reader-1", "PX", "60000", "SHARED"],
    ["LOCK.ACQUIRE", "lock:s", "reader-2", "PX", "30000", "SHARED"],
    ["LOCK.ACQUIRE", "lock:p", "job-1", "PX", "60000", "LIMIT", "3"],
    ["LOCK.FENCE", "gate", "5", "SET", "k", "v"],
    ["SADD", "set", "a", "b"],
    ["HSET", "hash", "f", "v"],
]
CLI_COMMANDS = [
    ["LOCK.INFO", "lock:e"],
    ["LOCK.INFO", "lock:s"],
    ["LOCK.INFO", "lock:p"],
    ["LOCK.INFO", "gate"],
    ["LOCK.INFO", "nothing"],
    ["LOCK.ACQUIRE", "lock:e", "worker-2", "PX", "1000"],
    ["LOCK.ACQUIRE", "lock:p", "job-2", "PX", "1000", "LIMIT", "2"],
    ["SMEMBERS", "set"],
    ["HGETALL", "hash"],
    ["LRANGE", "missing", "0", "-1"],
    ["CLIENT", "TRACKINGINFO"],
    ["COMMAND", "DOCS", "LOCK.ACQUIRE"],
]


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_replies_print_as_redis_cli_prints_them(resp3: bool) -> None:
    cli = cli_binary()
    if cli is None:
        pytest.skip("no redis-cli or valkey-cli to compare with")
    server = Server()
    conn = Conn(server.port)
    try:
        for command in CLI_SETUP:
            assert not isinstance(conn.call(command), Err), command
        if resp3:
            conn.call(["HELLO", "3"])
        for command in CLI_COMMANDS:
            shown = subprocess.run(
                [cli, "-p", str(server.port), "--no-raw", *(["-3"] if resp3 else []), *command],
                capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
            )
            expected = shown.stdout.rstrip("\n").split("\n")
            # Fences and TTLs are matched as on the pages; everything else must be equal.
            compare(expected, command, conn.call(command), Bindings(), f"{Path(cli).name} {' '.join(command)}")
    finally:
        conn.close()
        server.stop()

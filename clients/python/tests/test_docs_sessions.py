"""The redis-cli sessions of README.md and docs/*.md, replayed against a real server.

Every fenced block with `name> command` lines is a session: its commands are sent as they are
written (one server per page, blocks in order, one connection per prompt name; a fence the page
showed in an earlier reply stands for the fence the server answered there, as a reader types
their own) and each reply,
printed as redis-cli prints it (docs_replies.tty), must equal the lines shown. Only fences and
remaining times may differ, on a page that says they do (docs_replies.compare).

HTML comments before a block steer the replay: `<!-- replay: resp3 -->` (the block speaks RESP3),
`<!-- replay: server=bare -->` (a server started without the module in a directory holding
`./target/release/libredislock.so`, as `redis-server` run from the repository root would),
`<!-- replay: reply B -->` (the block is the reply to client B's command that was left waiting:
a command followed directly by another prompt is sent without reading its reply),
`<!-- replay: fresh -->` (the block shows a server just started, and runs on one).

A reader may run a page's sessions again on the same `make run`, whose AOF keeps the data even
across a restart: so each page runs twice on one server, and leaves no lock or gate behind.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from docs_pages import PAGES, PROMPT, Block, blocks, says_it_varies
from docs_replies import Bindings, Conn, compare, without_builtin_modules
from servers import REPO, Server, module_path


class Replay:
    def __init__(self, page: Path, server: Optional[Server] = None) -> None:
        self.page = page
        self.varies = says_it_varies(page)
        self.servers: Dict[str, Server] = {}
        self.shared = server
        if server is not None:
            self.servers["module"] = server
        self.conns: Dict[Tuple[str, str], Conn] = {}
        self.ids: Dict[Tuple[str, str], int] = {}
        self.bindings = Bindings()

    def server(self, kind: str) -> Server:
        if kind not in self.servers:
            if kind == "bare":
                s = Server(module=False, extra=["--enable-module-command", "yes"])
                # The module where a server started in the repository root finds it.
                os.makedirs(os.path.join(s.dir, "target", "release"))
                os.symlink(module_path(), os.path.join(s.dir, "target", "release", "libredislock.so"))
                self.servers[kind] = s
            else:  # the page's server, or (fresh:LINE) one just started for the block of LINE
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
            if s is not self.shared:
                s.stop()

    def wait_blocked(self, kind: str, name: str) -> None:
        """Until the server has the waiting command: blocked, or its reply ready to read."""
        conn = self.conns[(kind, name)]
        control = self.conn(kind, "__control__")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if select.select([conn.sock], [], [], 0)[0]:
                return
            listing = control.call(["CLIENT", "LIST", "ID", str(self.ids[(kind, name)])])
            text = listing.decode() if isinstance(listing, bytes) else str(listing)
            if re.search(r"flags=\S*b", text):
                return
            time.sleep(0.002)  # polling server state: a block has no event a client can await
        raise AssertionError(f"{self.page}: client {name}'s command neither blocked nor answered")

    def run_block(self, block: Block) -> None:
        replay = block.directive("replay") or ""
        kind = "bare" if replay == "server=bare" else f"fresh:{block.line}" if replay == "fresh" else "module"
        resp3 = replay == "resp3"
        if replay.startswith("reply "):
            name = replay.split()[1]
            conn = self.conns[(kind, name)]
            assert conn.waiting, f"{block.where}: client {name} has no command waiting"
            conn.waiting = False
            compare(block.lines, ["(waiting command)"], conn.read(), self.bindings, self.varies, block.where)
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
                # As written on the page, a reader pastes it; a fence shown before is the one answered.
                conn.send([self.bindings.real.get(a, a) if self.varies else a for a in args])
                if not expected:
                    conn.waiting = True
                    self.wait_blocked(kind, name)
                    continue
                reply = without_builtin_modules(args, conn.read())
                compare(expected, args, reply, self.bindings, self.varies, block.where)
        finally:
            if resp3:
                for name in used:
                    if not self.conn(kind, name).waiting:
                        self.conn(kind, name).call(["HELLO", "2"])




def session_pages() -> List[Path]:
    return [p for p in PAGES if any(b.is_session for b in blocks(p))]


def replay_page(page: Path, server: Server) -> None:
    replay = Replay(page, server)
    try:
        for block in blocks(page):
            if block.is_session:
                replay.run_block(block)
        waiting = [name for (_, name), c in replay.conns.items() if c.waiting]
        assert not waiting, f"{page}: commands of {waiting} never got their reply shown"
    finally:
        replay.close()


@pytest.mark.parametrize("page", session_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_redis_cli_sessions(page: Path) -> None:
    """The page's sessions on a fresh server, then once more on what they left behind: a
    reader who runs them again on the same `make run` (whose AOF keeps the data even across a
    restart) sees what the page shows, too."""
    server = Server()
    try:
        replay_page(page, server)
        client = server.client()
        left = [k for k in client.keys("*") if client.type(k) == b"redislock"]
        client.close()
        assert not left, f"{page}: the sessions leave {sorted(left)} behind"
        replay_page(page, server)
    finally:
        server.stop()


def test_pages_one_after_another_on_one_server() -> None:
    """A reader goes through the manual on one `make run`: each page's sessions show what the
    page shows after the pages before it, too."""
    server = Server()
    try:
        for page in session_pages():
            replay_page(page, server)
    finally:
        server.stop()

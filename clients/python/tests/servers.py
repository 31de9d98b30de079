"""Throw-away redis-server processes for the tests: loopback, a free port, a temporary directory,
the module loaded; always stopped.

REDIS_SERVER selects the server binary (default redis-server; a valkey-server works too) and
REDISLOCK_MODULE the module (default target/release/libredislock.so of the repository).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import redis

REPO = Path(__file__).resolve().parents[3]


def server_binary() -> str:
    return os.environ.get("REDIS_SERVER", "redis-server")


def module_path() -> str:
    path = os.environ.get("REDISLOCK_MODULE") or str(REPO / "target/release/libredislock.so")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise RuntimeError(f"no module at {path}: run cargo build --release (make test does)")
    return path


def free_port() -> int:
    # Ports for cluster nodes need port + 10000 free as well.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Server:
    """One redis-server process."""

    def __init__(self, module: bool = True, extra: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="redislock-py-")
        self.module = module
        self.extra = list(extra or [])
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.port = 0
        self.start()

    def start(self, port: Optional[int] = None) -> None:
        """Started, on a free port, or on ``port`` (a server that comes back where it was)."""
        last = ""
        for _ in range(5):  # a port taken between the probe and the bind: try another one
            self.port = port or free_port()
            args = [
                server_binary(),
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", self.dir,
                "--save", "",
                "--appendonly", "no",
                "--logfile", "server.log",
                "--daemonize", "no",
            ]
            if self.module:
                args += ["--loadmodule", module_path()]
            args += self.extra
            self.proc = subprocess.Popen(
                args, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                return
            last = self.log_tail()
            self.kill()
        raise RuntimeError(f"{server_binary()} did not start:\n{last}")

    def _wait_ready(self, seconds: float = 10.0) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.01)  # polling for the process to listen: no event to await
        return False

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """The process stopped (SIGSTOP, seen stopped) for the block, then continued: it reads,
        answers and acknowledges nothing meanwhile, as in ``DEBUG SLEEP``, but from a moment
        the test knows."""
        assert self.proc is not None
        pid = self.proc.pid
        os.kill(pid, signal.SIGSTOP)
        os.waitpid(pid, os.WUNTRACED)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
            os.waitpid(pid, os.WCONTINUED)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.kill()
        if not os.environ.get("REDISLOCK_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)


def cluster_info(c: redis.Redis) -> Dict[str, str]:
    """CLUSTER INFO as a dict of strings, whatever redis-py made of it."""
    client: Any = c
    info: Any = client.execute_command("CLUSTER", "INFO")
    if isinstance(info, bytes):
        info = info.decode()
    if isinstance(info, str):
        info = dict(l.split(":", 1) for l in info.split() if ":" in l)
    return {str(k): str(v) for k, v in info.items()}


class Cluster:
    """``nodes`` masters, slots split evenly, joined with CLUSTER MEET; with ``replicas``, that
    many replicas of each master (``self.replicas[i]`` are master ``i``'s)."""

    def __init__(self, nodes: int = 3, replicas: int = 0, node_timeout: int = 5000) -> None:
        self.nodes: List[Server] = []
        self.replicas: List[List[Server]] = []
        conf = ["--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout),
                "--repl-diskless-sync-delay", "0"]
        try:
            for _ in range(nodes):
                self.nodes.append(Server(extra=conf))
            for _ in range(nodes):
                self.replicas.append([Server(extra=conf) for _ in range(replicas)])
            step = 16384 // nodes
            for i, node in enumerate(self.nodes):
                first, last = i * step, (16383 if i == nodes - 1 else (i + 1) * step - 1)
                with node.client() as c:
                    c.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
            for node in self.all_nodes()[1:]:
                with node.client() as c:
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
            self._wait_ok()
            for master, followers in zip(self.nodes, self.replicas):
                for replica in followers:
                    with replica.client() as c:
                        c.execute_command("CLUSTER", "REPLICATE", self.node_id(master))
            self._wait_synced()
        except BaseException:
            self.stop()
            raise

    def all_nodes(self) -> List[Server]:
        return self.nodes + [r for followers in self.replicas for r in followers]

    @staticmethod
    def node_id(node: Server) -> str:
        with node.client() as c:
            return str(c.execute_command("CLUSTER", "MYID").decode())

    def _wait_ok(self, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        clients = [n.client() for n in self.all_nodes()]
        try:
            while time.monotonic() < deadline:
                ok = True
                for c in clients:
                    state = cluster_info(c)
                    if state.get("cluster_state") != "ok" or state.get("cluster_known_nodes") != str(len(clients)):
                        ok = False
                        break
                if ok:
                    return
                time.sleep(0.05)  # gossip has no event a client can await
            raise RuntimeError("the cluster did not reach cluster_state:ok")
        finally:
            for c in clients:
                c.close()

    def _wait_synced(self, seconds: float = 20.0) -> None:
        """Every replica's link to its master is up, and every master lists its replicas."""
        deadline = time.monotonic() + seconds
        for master, followers in zip(self.nodes, self.replicas):
            for replica in followers:
                with replica.client() as c:
                    while c.info("replication").get("master_link_status") != "up":
                        if time.monotonic() > deadline:
                            raise RuntimeError("a replica did not sync with its master")
                        time.sleep(0.05)  # replication has no event a client can await
            with master.client() as c:
                while int(c.info("replication").get("connected_slaves", 0)) < len(followers):
                    if time.monotonic() > deadline:
                        raise RuntimeError("a master does not list its replicas")
                    time.sleep(0.05)

    def master_of(self, slot: int) -> Server:
        """The node serving ``slot`` now (asked of a live node)."""
        for node in self.all_nodes():
            if node.proc is None:
                continue
            with node.client() as c:
                for first, last, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if first <= slot <= last:
                        port = int(master[1])
                        return next(n for n in self.all_nodes() if n.port == port)
        raise RuntimeError(f"no node serves slot {slot}")

    def move_slot(self, slot: int, source: Server, target: Server, keys: List[bytes], between: Optional[Callable[[], None]] = None) -> None:
        """Moves ``slot`` as redis-cli --cluster reshard does: IMPORTING on the target,
        MIGRATING on the source, MIGRATE of ``keys``, then ``between()`` (the slot is split:
        the keys on the target, the slot still the source's), then SETSLOT … NODE everywhere."""
        source_id, target_id = self.node_id(source), self.node_id(target)
        with target.client() as t, source.client() as s:
            t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            s.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            if between is not None:
                between()
            t.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for node in self.nodes:
            if node.proc is not None and node not in (source, target):
                with node.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def wait_promoted(self, replica: Server, seconds: float = 30.0) -> None:
        """Waits until ``replica`` is a master serving slots, seen so by every live node."""
        deadline = time.monotonic() + seconds
        with replica.client() as c:
            while c.execute_command("ROLE")[0] != b"master":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica was not promoted")
                time.sleep(0.05)  # a failover has no event a client can await
        self._wait_state_ok(deadline)

    def _wait_state_ok(self, deadline: float) -> None:
        for node in self.all_nodes():
            if node.proc is None:
                continue
            with node.client() as c:
                while cluster_info(c).get("cluster_state") != "ok":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the cluster did not recover")
                    time.sleep(0.05)

    @property
    def port(self) -> int:
        """A live node's port: where a client starts."""
        return next(n.port for n in self.all_nodes() if n.proc is not None)

    def stop(self) -> None:
        for n in self.all_nodes():
            n.stop()

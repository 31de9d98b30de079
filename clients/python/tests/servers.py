"""Throw-away redis-server processes for the tests: loopback, a free port, a temporary directory,
the module loaded; always stopped.

REDIS_SERVER selects the server binary (default redis-server; a valkey-server works too) and
REDISLOCK_MODULE the module (default target/release/libredislock.so of the repository).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

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
            port = s.getsockname()[1]
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
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.start()

    def start(self) -> None:
        last = ""
        for _ in range(5):  # a port taken between the probe and the bind: try another one
            self.port = free_port()
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

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.kill()
        if not os.environ.get("REDISLOCK_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three masters, slots split in three, joined with CLUSTER MEET."""

    def __init__(self, nodes: int = 3) -> None:
        self.nodes: List[Server] = []
        try:
            for _ in range(nodes):
                self.nodes.append(
                    Server(extra=["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                )
            step = 16384 // nodes
            for i, node in enumerate(self.nodes):
                first, last = i * step, (16383 if i == nodes - 1 else (i + 1) * step - 1)
                c = node.client()
                c.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
                if i:
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
                c.close()
            self._wait_ok()
        except BaseException:
            self.stop()
            raise

    def _wait_ok(self, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        clients = [n.client() for n in self.nodes]
        try:
            while time.monotonic() < deadline:
                ok = True
                for c in clients:
                    info = c.execute_command("CLUSTER", "INFO")
                    if isinstance(info, bytes):
                        info = info.decode()
                    if isinstance(info, str):
                        info = dict(l.split(":", 1) for l in info.split() if ":" in l)
                    state = {str(k): str(v) for k, v in info.items()}
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

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

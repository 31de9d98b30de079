"""The failover soak's servers: a master and two replicas with AOF and the module, and three
Sentinels, on free loopback ports, every process started here and killed at exit.

Each process runs in a session (process group) of its own, under `setpriv --pdeathsig KILL`
where it exists, so that it dies with the soak even when the soak itself is killed; `reap()`
(run at exit, on Ctrl-C and on SIGTERM) kills every group still alive. Processes are started
from the main thread only (the death signal follows the thread that started them).

Waiting is on events: Sentinel's `+switch-master` on its pub/sub (and every Sentinel naming the
new master), a replica's `master_link_status:up`, each Sentinel seeing the replicas healthy;
each wait has a deadline and fails with what it last saw.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import redis

SERVICE = "soak"
REPL_USER, REPL_PASS = "replication", "soak-replication"
Addr = Tuple[str, int]

_live: List["Proc"] = []
_live_mutex = threading.Lock()


def reap() -> None:
    """Kills every process the soak started that is still alive (their whole groups)."""
    with _live_mutex:
        procs = list(_live)
    for proc in procs:
        proc.kill()


def _on_signal(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def install_cleanup() -> None:
    atexit.register(reap)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


def wait_for(what: str, probe: Callable[[], Any], deadline: float, every: float = 0.05) -> Any:
    """Polls `probe` until it returns something true (returned) or `deadline` (monotonic)
    passes: then RuntimeError with the last value or error seen."""
    last: Any = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as err:  # the server may be restarting: look again
            last = err
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out waiting for {what} (last: {last!r})")
        time.sleep(every)


class Proc:
    """One server process in its own process group."""

    def __init__(self, args: List[str], log: str) -> None:
        wrap = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                wrap + args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pid = self.popen.pid
        with _live_mutex:
            _live.append(self)

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL to the group (a stopped process dies of it too), then reaped."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with _live_mutex:
            if self in _live:
                _live.remove(self)


def client(port: int, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True)


class Node:
    """A data node (master or replica): its port and directory stay when it is restarted."""

    def __init__(self, server: str, module: str, base: str, index: int, extra: List[str]) -> None:
        self.server, self.module, self.extra = server, module, extra
        self.port = free_port()
        self.dir = os.path.join(base, f"node-{index}")
        os.makedirs(self.dir, exist_ok=True)
        self.proc: Optional[Proc] = None

    @property
    def addr(self) -> Addr:
        return ("127.0.0.1", self.port)

    def start(self, replica_of: Optional[Addr] = None, priority: int = 100) -> None:
        args = [self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--appendonly", "yes", "--save", "", "--loadmodule", self.module,
                "--logfile", os.path.join(self.dir, "server.log"), "--daemonize", "no",
                "--repl-diskless-sync-delay", "0", "--replica-priority", str(priority),
                # Replicas log in as a user of their own, so that a cut can keep them out.
                "--user", REPL_USER, "on", f">{REPL_PASS}", "allkeys", "allchannels", "+@all",
                "--masteruser", REPL_USER, "--masterauth", REPL_PASS, *self.extra]
        if replica_of is not None:
            args += ["--replicaof", replica_of[0], str(replica_of[1])]
        self.proc = Proc(args, os.path.join(self.dir, "stdout.log"))
        wait_for(f"server on port {self.port}", lambda: client(self.port).ping(), time.monotonic() + 20)

    def info(self, section: str = "replication") -> Dict[str, Any]:
        info: Dict[str, Any] = client(self.port).info(section)
        return info

    def link_up(self) -> bool:
        info = self.info()
        return info.get("role") == "slave" and info.get("master_link_status") == "up"


class Sentinel:
    def __init__(self, server: str, base: str, index: int, master: Addr, quorum: int, down_after_ms: int,
                 failover_timeout_ms: int) -> None:
        self.port = free_port()
        self.dir = os.path.join(base, f"sentinel-{index}")
        os.makedirs(self.dir, exist_ok=True)
        conf = os.path.join(self.dir, "sentinel.conf")  # Sentinel rewrites its file: one of its own
        with open(conf, "w") as f:
            log = os.path.join(self.dir, "sentinel.log")
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile {log}\n"
                    f"sentinel monitor {SERVICE} {master[0]} {master[1]} {quorum}\n"
                    f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
                    f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n"
                    f"sentinel parallel-syncs {SERVICE} 2\n")
        self.proc = Proc([server, conf, "--sentinel"], os.path.join(self.dir, "stdout.log"))
        wait_for(f"sentinel on port {self.port}", lambda: client(self.port).ping(), time.monotonic() + 20)

    def master_addr(self) -> Optional[Addr]:
        reply = client(self.port).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return (reply[0], int(reply[1])) if reply else None

    def master_flags(self) -> str:
        return _pairs(client(self.port).execute_command("SENTINEL", "MASTER", SERVICE)).get("flags", "")

    def healthy(self, replicas: int, others: int) -> bool:
        """This Sentinel sees the master up, `replicas` replicas up as its replicas, and
        `others` other Sentinels. (Whether a replica's link is up Sentinel learns from its INFO
        every 10 s; the replicas themselves are asked that.)"""
        c = client(self.port)
        master = _pairs(c.execute_command("SENTINEL", "MASTER", SERVICE))
        if master.get("flags") != "master" or int(master.get("num-other-sentinels", 0)) < others:
            return False
        seen = [_pairs(r) for r in c.execute_command("SENTINEL", "REPLICAS", SERVICE)]
        good = [r for r in seen if r.get("flags") == "slave"]
        return len(good) >= replicas


def _pairs(flat: Any) -> Dict[str, str]:
    if isinstance(flat, dict):
        return {str(k): str(v) for k, v in flat.items()}
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


class Switches:
    """`+switch-master` (and every other event, logged) from each Sentinel's pub/sub."""

    def __init__(self, sentinels: List[Sentinel], log: str) -> None:
        self.events: "queue.Queue[Tuple[float, Addr, Addr]]" = queue.Queue()
        self.seen: List[Tuple[float, Addr, Addr]] = []  # distinct switches, in order
        self.stop = threading.Event()
        self.log = open(log, "a")
        self.mutex = threading.Lock()
        self.threads = [threading.Thread(target=self._listen, args=(s,), daemon=True) for s in sentinels]
        for t in self.threads:
            t.start()

    def _listen(self, sentinel: Sentinel) -> None:
        pubsub = client(sentinel.port, timeout=5).pubsub()
        pubsub.psubscribe("*")
        while not self.stop.is_set():
            try:
                msg = pubsub.get_message(timeout=0.2)
            except Exception as err:  # the sentinel is gone at the end of the leg
                if not self.stop.is_set():
                    self._write(f"sentinel {sentinel.port}: listener ended: {err!r}")
                return
            if not msg or msg.get("type") != "pmessage":
                continue
            channel, data = str(msg["channel"]), str(msg["data"])
            self._write(f"sentinel {sentinel.port} {channel} {data}")
            if channel == "+switch-master":
                _, old_host, old_port, new_host, new_port = data.split()
                self._note((old_host, int(old_port)), (new_host, int(new_port)))
        pubsub.close()

    def _write(self, line: str) -> None:
        with self.mutex:
            self.log.write(f"{time.monotonic():.3f} {line}\n")
            self.log.flush()

    def _note(self, old: Addr, new: Addr) -> None:
        """Each Sentinel publishes the switch once; it is counted once."""
        with self.mutex:
            if self.seen and self.seen[-1][1:] == (old, new):
                return
            event = (time.monotonic(), old, new)
            self.seen.append(event)
        self.events.put(event)

    def await_from(self, old: Addr, deadline: float) -> Addr:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no +switch-master away from {old} in time")
            try:
                _, was, new = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if was == old:
                return new

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(2)
        self.log.close()


class Topology:
    """The master, its two replicas and three Sentinels (quorum 2), with the faults."""

    def __init__(self, server: str, module: str, base: str, extra: List[str], down_after_ms: int = 2000,
                 failover_timeout_ms: int = 5000) -> None:
        self.nodes = [Node(server, module, base, i, extra) for i in range(3)]
        self.master = self.nodes[0]
        self.master.start()
        for node in self.nodes[1:]:
            node.start(replica_of=self.master.addr)
        self.sentinels = [
            Sentinel(server, base, i, self.master.addr, 2, down_after_ms, failover_timeout_ms) for i in range(3)
        ]
        self.switches = Switches(self.sentinels, os.path.join(base, "sentinel-events.log"))
        #: Called with the new master as soon as it serves (every Sentinel names it, it is up).
        self.on_new_master: Optional[Callable[["Node"], None]] = None
        self.await_healthy()

    def sentinel_addrs(self) -> List[Addr]:
        return [("127.0.0.1", s.port) for s in self.sentinels]

    @property
    def replicas(self) -> List[Node]:
        return [n for n in self.nodes if n is not self.master]

    def node_at(self, addr: Addr) -> Node:
        return next(n for n in self.nodes if n.addr == addr)

    def await_healthy(self, secs: float = 60) -> None:
        """The master takes writes with both replicas online, and every Sentinel names it and
        sees both replicas and the two other Sentinels."""
        deadline = time.monotonic() + secs
        wait_for("every Sentinel naming the master",
                 lambda: all(s.master_addr() == self.master.addr for s in self.sentinels), deadline)
        for node in self.replicas:
            wait_for(f"replica {node.port} with its link up", node.link_up, deadline)
        wait_for("the master's two replicas online",
                 lambda: sum(1 for k, v in self.master.info().items()
                             if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online") == 2,
                 deadline)
        for s in self.sentinels:
            wait_for(f"Sentinel {s.port} seeing both replicas", lambda: s.healthy(2, 2), deadline)

    def await_failover(self, old: Node, secs: float = 45) -> Tuple[Node, float]:
        """The new master, and when Sentinel announced it."""
        new_addr = self.switches.await_from(old.addr, time.monotonic() + secs)
        switched = time.monotonic()
        return self._settle(new_addr, secs), switched

    def _settle(self, new_addr: Addr, secs: float) -> Node:
        """After `+switch-master`: every Sentinel names the new master and sees it up, and it
        is in its role."""
        deadline = time.monotonic() + secs
        wait_for("every Sentinel naming the new master",
                 lambda: all(s.master_addr() == new_addr for s in self.sentinels), deadline)
        new = self.node_at(new_addr)
        wait_for("the new master in its role", lambda: new.info().get("role") == "master", deadline)
        wait_for("every Sentinel seeing the new master up",
                 lambda: all(s.master_flags() == "master" for s in self.sentinels), deadline)
        self.master = new
        if self.on_new_master is not None:
            self.on_new_master(new)
        return new

    def kill_master(self) -> Dict[str, float]:
        """kill -9 of the master; once Sentinel promoted a replica, the old master is started
        again from its AOF as a replica of the new one, as an operator would."""
        old = self.master
        assert old.proc is not None
        t0 = time.monotonic()
        old.proc.kill()
        return self._recover(old, t0)

    def _recover(self, old: Node, t0: float) -> Dict[str, float]:
        """Starts the old master again as a replica of the new one. Until it has synced it has
        replica-priority 0: Sentinel must not promote a replica that holds only its own AOF."""
        new, switched = self.await_failover(old)
        failover = switched - t0
        old.start(replica_of=new.addr, priority=0)
        wait_for(f"restarted node {old.port} synced", old.link_up, time.monotonic() + 60)
        client(old.port).config_set("replica-priority", 100)
        self.await_healthy()
        return {"failover": failover}

    def pause_master(self) -> Dict[str, float]:
        """SIGSTOP of the master until Sentinel promoted a replica, then (at once) SIGCONT: the
        old master serves as a master again (split brain) until Sentinel demotes it."""
        old = self.master
        assert old.proc is not None
        t0 = time.monotonic()
        old.proc.signal(signal.SIGSTOP)
        try:
            new_addr = self.switches.await_from(old.addr, t0 + 45)
        finally:
            old.proc.signal(signal.SIGCONT)
        back = time.monotonic()
        new = self._settle(new_addr, 45)
        wait_for("the old master demoted by Sentinel",
                 lambda: old.info().get("role") == "slave" and int(old.info().get("master_port", 0)) == new.port,
                 back + 60)
        split = time.monotonic() - back
        self.await_healthy()
        return {"failover": back - t0, "split": split}

    def cut_then_kill(self, secs: float) -> Dict[str, float]:
        """Cuts the replication links for `secs` while clients and Sentinels still reach the
        master (the replicas' user is switched off and their connections killed, so they cannot
        come back), then kill -9 of the master, then as `kill_master`."""
        old = self.master
        assert old.proc is not None
        c = client(old.port)
        c.execute_command("ACL", "SETUSER", REPL_USER, "off")
        c.execute_command("CLIENT", "KILL", "USER", REPL_USER)
        wait_for("the replicas' links down", lambda: all(not n.link_up() for n in self.replicas),
                 time.monotonic() + 10)
        time.sleep(secs)  # the length of the cut: the replicas fall behind meanwhile
        t0 = time.monotonic()
        old.proc.kill()
        return self._recover(old, t0)

    def close(self) -> None:
        self.switches.close()
        for s in self.sentinels:
            s.proc.kill()
        for n in self.nodes:
            if n.proc is not None:
                n.proc.kill()

"""Stalls with waiters, for bench/waiting.py: the worst PING a second
connection sees while the server deals with many waiters at once, the
module's against the server's own, each run on a fresh server.

  disconnect  N connections wait, all held by one process, which is killed
              while the server runs (pinned to its CPU, the killed process
              on the clients'): the server finds the connections closed
              as the kernel closes them, many per turn of its event loop.
              Sides: the module's waiters of each kind, behind a held
              lock — exclusive (LOCK.ACQUIRE md <token> PX 600000 BLOCK 0),
              shared (... SHARED), semaphore (... LIMIT 1) and multi-key
              (LOCK.ACQUIREALL 2 md md2 ...); the floor, a module command
              that only blocks (FLOOR.WAIT of bench/floor/blockfloor.c);
              native, BLPOP md 0 on an empty list. The window runs from the
              kill until the server has no blocked client and only the
              control and PING connections left, and the module has let
              every closed wait go (INFO redislock waiters_leaving 0), plus
              300 ms.
  storm       KEYS keys whose leases end at the same moment (the module:
              exclusive locks, WAITERS of them, spread evenly, with a
              waiter each — LOCK.ACQUIRE ... BLOCK 0 from connections held
              by another process — then every lease set to end at that
              moment with LOCK.EXTEND; native: plain keys, SET then
              PEXPIREAT, no waiters; floor: keys of a minimal module type,
              bench/floor/typefloor.c's FLOOR.SET then PEXPIREAT, no
              waiters — what any module-typed key costs as it expires). The window runs from 100 ms before that moment
              until every waiter is granted and every other key is gone
              (native: every key is gone), plus 300 ms.
"""

import multiprocessing as mp
import os
import signal
import socket
import time

from resp import encode
from stalls import Pinger, pipe, server_ms, wait_for

TAIL_S = 0.3


def _pin(cpus):
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def _hold(port, commands, cpus, tx):
    """Opens one connection per command, sends it, reports, then waits to be
    killed (its connections close with it)."""
    _pin(cpus)
    socks = []
    try:
        for _ in commands:
            socks.append(socket.create_connection(("127.0.0.1", port)))
        for s, cmd in zip(socks, commands):
            s.sendall(cmd)
        tx.send(len(socks))
    except Exception as e:  # reported to the parent, which fails the run
        tx.send(repr(e))
    while True:
        signal.pause()


class Holder:
    """A process holding one connection per command, blocked in it."""

    def __init__(self, port, commands, cpus):
        ctx = mp.get_context("fork")
        rx, tx = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_hold, args=(port, commands, cpus, tx), daemon=True)
        self.proc.start()
        if not rx.poll(120):
            self.kill()
            raise RuntimeError("the waiters' connections were not opened in time")
        got = rx.recv()
        if got != len(commands):
            self.kill()
            raise RuntimeError("opening the waiters' connections: %s" % (got,))

    def kill(self):
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def _pinger(port):
    """stalls.Pinger, free to run on every CPU: on the clients' CPU alone it
    would wait behind the kernel closing the killed process's connections,
    which is no stall of the server."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count()))
    try:
        return Pinger(port)
    finally:
        os.sched_setaffinity(0, mine)


def _main_thread_cpu_s(pid):
    """CPU time of the server's main thread, to the nanosecond (schedstat;
    /proc/PID/stat counts in clock ticks of 10 ms)."""
    with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
        return int(f.read().split()[0]) / 1e9


def _clients(c):
    info = c.info("clients")
    return int(info["connected_clients"]), int(info["blocked_clients"])


DISCONNECT_SIDES = ("exclusive", "shared", "semaphore", "multi", "floor", "native")


def _waiter_commands(c, side, n):
    """The held locks, then one blocking command per waiter."""
    hold = {"shared": [], "semaphore": ["LIMIT", 1], "multi": []}
    if side in ("exclusive", "shared", "semaphore", "multi"):
        c.call("LOCK.ACQUIRE", "md", "holder", "PX", 600000, *hold.get(side, []))
    if side == "multi":
        c.call("LOCK.ACQUIRE", "md2", "holder", "PX", 600000)
        return [encode(["LOCK.ACQUIREALL", 2, "md", "md2", "w%d" % i, "PX", 600000, "BLOCK", 0])
                for i in range(n)]
    if side in ("exclusive", "shared", "semaphore"):
        mode = {"exclusive": [], "shared": ["SHARED"], "semaphore": ["LIMIT", 1]}[side]
        return [encode(["LOCK.ACQUIRE", "md", "w%d" % i, "PX", 600000, *mode, "BLOCK", 0]) for i in range(n)]
    if side == "floor":
        return [encode(["FLOOR.WAIT"])] * n
    return [encode(["BLPOP", "md", 0])] * n


def _let_go(c):
    """Closed waits the module has still to let go (0 where it has none)."""
    return int(c.info("redislock").get("redislock_waiters_leaving", 0))


def disconnect_run(server, side, n, cpus):
    """(worst PING in ms, CPU of the server's main thread in ms until it let
    them all go: on an idle machine the stall is about that long, and other
    load moves the CPU time much less than the PING)."""
    c = server.c
    c.call("DEL", "md", "md2")
    commands = _waiter_commands(c, side, n)
    with Holder(server.port, commands, cpus) as holder:
        wait_for("the waiters", lambda: _clients(c)[1] >= n)
        with _pinger(server.port) as p:
            time.sleep(TAIL_S)
            cpu0 = _main_thread_cpu_s(server.pid)
            t0 = time.monotonic()
            # As an operator's client process dies: the kernel closes its
            # connections while the server runs.
            holder.kill()
            # The control connection and the PING one are left.
            wait_for("the waiters to go", lambda: _clients(c) == (2, 0) and _let_go(c) == 0)
            t1, cpu1 = time.monotonic(), _main_thread_cpu_s(server.pid)
            time.sleep(TAIL_S)
    c.call("DEL", "md", "md2")
    waits = [t + rtt - max(t, t0) for t, rtt in p.finish() if t + rtt >= t0 and t <= t1 + TAIL_S]
    return max(waits) * 1000, (cpu1 - cpu0) * 1000


def _timed(c, keys, command):
    """Sends command(i, px) for every key in pipelined batches, px being the
    time left to the common end from the server's clock before each batch."""
    batch = 2000
    for start in range(0, keys, batch):
        cmds = [command(i) for i in range(start, min(keys, start + batch))]
        errors = pipe(c, cmds, batch)
        if errors:
            raise RuntimeError("%d of %s failed" % (errors, cmds[0][0]))


def storm_run(server, side, keys, waiters, cpus, lead_ms):
    """(worst PING in ms, seconds from the lease end until all was done).

    The keys are made with a long lease, the module's waiters blocked, and
    then every lease set to end at one moment (the module: LOCK.EXTEND with
    the time left; native: PEXPIREAT), with a lead of twice the time making
    the keys took, at least lead_ms."""
    c = server.c
    step = keys // max(1, waiters)
    commands = []
    t = time.monotonic()
    if side == "module":
        _timed(c, keys, lambda i: ["LOCK.ACQUIRE", "st:%d" % i, "h", "PX", 600000])
        commands = [encode(["LOCK.ACQUIRE", "st:%d" % (i * step), "w%d" % i, "PX", 600000, "BLOCK", 0])
                    for i in range(waiters)]
    elif side == "floor":
        _timed(c, keys, lambda i: ["FLOOR.SET", "st:%d" % i, "h", "PX", 600000])
    else:
        _timed(c, keys, lambda i: ["SET", "st:%d" % i, "v", "PX", 600000])
    lead_ms = max(lead_ms, int((time.monotonic() - t) * 2000) + 1000)
    with Holder(server.port, commands, cpus):
        wait_for("the waiters", lambda: _clients(c)[1] >= len(commands))
        at = server_ms(c) + lead_ms
        if side == "module":
            batch_px = {}

            def extend(i):
                if i % 2000 == 0:
                    batch_px["px"] = at - server_ms(c)
                    if batch_px["px"] < 300:
                        raise RuntimeError("module: setting the leases took longer than the lead of %d ms"
                                           % lead_ms)
                return ["LOCK.EXTEND", "st:%d" % i, "h", "PX", batch_px["px"]]
            _timed(c, keys, extend)
        else:
            _timed(c, keys, lambda i: ["PEXPIREAT", "st:%d" % i, at])
        if server_ms(c) > at - 300:
            raise RuntimeError("%s: setting the leases took longer than the lead of %d ms" % (side, lead_ms))
        with _pinger(server.port) as p:
            while server_ms(c) < at - 100:
                time.sleep(0.01)
            t0 = time.monotonic()
            left = waiters if side == "module" else 0
            wait_for("the storm to pass", lambda: _clients(c)[1] == 0 and c.call("DBSIZE") == left)
            t1 = time.monotonic()
            time.sleep(TAIL_S)
    return p.worst_ms(t0, t1 + TAIL_S), t1 - t0 - 0.1

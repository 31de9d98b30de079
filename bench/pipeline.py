"""Delivery of pre-built acquire/release pairs at C speed (stdlib and
`redis-cli`).

For figures `redis-benchmark` cannot take: it repeats ONE command per
request, with independent `__rand_int__` values, so it cannot release the
holder its own acquire just created. Here the RESP of every pair of a run
is built before the run, untimed (`build`: pair j's acquire and release both
name the token of j), as one stream per process, each on its own share of
the keys; `run` then delivers each stream through its own
`redis-cli --pipe`. That is C (hiredis): it writes the stream as fast as
the socket takes it, reads and counts the replies meanwhile, and exits once
the reply to an ECHO it sends last is in, i.e. once every reply has arrived.
The same code delivers both sides of a pair; only the bytes differ.

The clock starts when every process is connected and their streams start
flowing (from this process, through pipes), and stops when the last one has
exited. Whether the client or the server limited a run shows in the server
main thread's scheduler statistics (/proc/PID/task/PID/schedstat): the
share of the run it was on a CPU, the share it was runnable but waiting for
a CPU (other load on the machine), and the rest, in which it was idle —
waiting for the client. A server-bound run has an idle share near 0.
"""

import os
import subprocess
import tempfile
import threading
import time

from resp import Redis


class Slot:
    """An argument of a command template: bytes of exactly `size` characters,
    filled in with `%` (see template)."""

    def __init__(self, size):
        self.size = size


def template(*args):
    """RESP of one command as a bytes %-template: each Slot argument becomes
    a `%s` for bytes of its size; other arguments are literal."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, Slot):
            parts.append(b"$%d\r\n%%s\r\n" % a.size)
        else:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b.replace(b"%", b"%%")))
    return b"".join(parts)


TOKEN = b"holder-%015d"  # 22 bytes


def build(acquire, release, keys, first, count, clock=None):
    """RESP bytes of `count` acquire/release pairs. Pair i (0-based) is on
    keys[i % len(keys)] with token TOKEN % (first + i), so tokens never
    repeat as long as the callers' ranges do not overlap. `acquire` has the
    slots (key, token) — or (key, token, clock) when `clock` (bytes) is
    given — and `release` (key, token)."""
    nk = len(keys)
    per = 128  # pairs per template round
    out = []
    for lo in range(0, count, per):
        n = min(per, count - lo)
        t = (acquire + release) * n
        a = []
        if clock is None:
            for i in range(lo, lo + n):
                k, tok = keys[i % nk], TOKEN % (first + i)
                a += (k, tok, k, tok)
        else:
            for i in range(lo, lo + n):
                k, tok = keys[i % nk], TOKEN % (first + i)
                a += (k, tok, clock, k, tok)
        out.append(t % tuple(a))
    return b"".join(out)


def _schedstat(pid):
    """(ns on a CPU, ns runnable waiting for a CPU) of a local process's main
    thread, or None."""
    try:
        with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def _feed(proc, data, failed):
    fd = proc.stdin.fileno()
    view = memoryview(data)
    off = 0
    try:
        while off < len(view):
            off += os.write(fd, view[off:off + (1 << 20)])
    except OSError as e:  # the process died: its own output says why
        failed.append(repr(e))
    finally:
        proc.stdin.close()


def run(port, streams, cpus=None, host="127.0.0.1", connect_timeout=10.0):
    """Delivers each stream (bytes of RESP commands) through its own
    `redis-cli --pipe`, all at once. Returns a dict: seconds (see the module
    comment), replies and errors (summed over the processes, from their
    final `errors: E, replies: R` line), first_error (the first error reply,
    or why a process failed), client_cpu (CPU time of the processes, their
    start-up included, and of this one / seconds), and server_cpu, server_wait, server_idle (shares of
    the run; None if the server's process is not readable here)."""
    ctl = Redis(port, host)
    old = None
    procs = []
    threads = []
    outputs = []
    failed = []
    try:
        base = int(ctl.info("clients")["connected_clients"])
        pid = int(ctl.info("server")["process_id"])
        if cpus:  # the processes inherit it
            try:
                old = os.sched_getaffinity(0)
                os.sched_setaffinity(0, cpus)
            except (AttributeError, OSError):
                old = None
        for _ in streams:
            # Output to files: a run with many error replies (one line each
            # on stderr) must not fill a pipe nobody reads until the end.
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            outputs.append((out, err))
            procs.append(subprocess.Popen(
                ["redis-cli", "-h", host, "-p", str(port), "--pipe"],
                stdin=subprocess.PIPE, stdout=out, stderr=err,
            ))
        deadline = time.monotonic() + connect_timeout
        while int(ctl.info("clients")["connected_clients"]) < base + len(procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("redis-cli --pipe did not connect")
            time.sleep(0.002)
        s0 = _schedstat(pid)
        p0 = time.process_time()
        t0 = time.monotonic()
        for p, data in zip(procs, streams):
            th = threading.Thread(target=_feed, args=(p, data, failed))
            th.start()
            threads.append(th)
        child_cpu = 0.0
        for p in procs:
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            child_cpu += usage.ru_utime + usage.ru_stime
        secs = time.monotonic() - t0
        s1 = _schedstat(pid)
        client_cpu = (child_cpu + time.process_time() - p0) / secs
    finally:
        for th in threads:
            th.join()
        for p in procs:
            if p.returncode is None:
                p.kill()
                p.wait()
        if old is not None:
            os.sched_setaffinity(0, old)
        ctl.close()
    replies = errors = 0
    first_error = failed[0] if failed else None
    for p, (fo, fe) in zip(procs, outputs):
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode(errors="replace")
        err = fe.read(4096).decode(errors="replace").strip()
        fo.close()
        fe.close()
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if not last.startswith("errors: "):
            raise RuntimeError("redis-cli --pipe failed (exit %s): %s %s" % (p.returncode, out[-200:], err[-200:]))
        e, r = (int(x.split(": ")[1]) for x in last.split(", "))
        errors += e
        replies += r
        if e and first_error is None:
            first_error = err.splitlines()[0] if err else "?"
    res = {"seconds": secs, "replies": replies, "errors": errors, "first_error": first_error,
           "client_cpu": client_cpu, "server_cpu": None, "server_wait": None, "server_idle": None}
    if s0 and s1:
        res["server_cpu"] = (s1[0] - s0[0]) / 1e9 / secs
        res["server_wait"] = (s1[1] - s0[1]) / 1e9 / secs
        res["server_idle"] = max(0.0, 1.0 - res["server_cpu"] - res["server_wait"])
    return res

"""The connection a bound hold lives on (sync): an ``EPHEMERAL`` lock's, a multi-lock's with
``ephemeral=True``, every ``Election`` term's.

The server releases a bound hold when its connection closes, so that connection is the
library's own, opened for the hold from the application client's settings (host, port, TLS,
auth, database; on a Cluster, the node serving the key) and never one of the application's
pool: the application's command timeouts and reconnects cannot touch it. The grant, the
renewals and the release go on it, one command at a time, each bounded as a command on the lock's
other connections (``_link.exchange``), or by the lease when nothing else bounds it.

Between commands one thread of the process (``_Watcher``, named ``redislock-watch``) waits in
``select`` on the sockets of every bound hold: a socket that reports EOF or a reset while no
command is out means the server closed the connection (``CLIENT KILL``, a restart, the idle
``timeout``), and so released the hold: the front end is told at once (``on_close``). The thread
leaves when no hold is watched. ``close()`` ends the connection when the hold ends.

The same thread keeps each connection active: after ``KEEPALIVE`` seconds without a command it
sends a ``PING`` (without waiting for it: its reply is read when it arrives, or by the next
command first), so the server's idle ``timeout`` never closes it while the hold lives, however
long the lease and its renewals' interval.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import redis as redis_py
from redis.exceptions import AskError, ConnectionError, MovedError, ResponseError

from ._flow import Request, Send
from ._link import exchange, own_connections

__all__ = ["KEEPALIVE", "Owned", "carrier", "owned_for", "probe", "settings"]

#: Seconds of silence after which a bound connection sends a PING (the server's idle
#: ``timeout`` is a whole number of seconds, 1 or more; the watcher looks four times as often).
KEEPALIVE = 1.0


def settings(client: Any, key: Any, node: Any = None) -> Tuple[Any, Dict[str, Any]]:
    """The connection class and settings for a bound hold on ``key``: the client's (its pool's),
    or on a Cluster those of the node serving the key (or ``node``), without retries and
    without the application's read timeout."""
    if isinstance(client, redis_py.RedisCluster):
        cluster: Any = client
        target = node if node is not None else cluster.get_node_from_key(key)
        pool = cluster.get_redis_connection(target).connection_pool
    else:
        pool = client.connection_pool
    cls, kwargs = own_connections(pool)
    kwargs["socket_timeout"] = None
    return cls, kwargs


def probe(sock: Any) -> Optional[str]:
    """What a socket that ``select`` found readable while no command was out says, without
    waiting (the socket is made non-blocking for the look: with a timeout set, Python would
    wait for data first): None (nothing to read: a reply read meanwhile), else why the
    connection is over (the server closed it, reset it, or sent what nobody asked for)."""
    try:
        timeout = sock.gettimeout()
        sock.settimeout(0)
    except (OSError, ValueError):
        return "reset"
    try:
        if isinstance(sock, ssl.SSLSocket):
            if sock.pending():
                return "unexpected data"
            data = sock.recv(1)
        else:
            data = sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except (OSError, ValueError):
        return "reset"
    finally:
        try:
            sock.settimeout(timeout)
        except (OSError, ValueError):  # closed meanwhile
            pass
    return "closed" if not data else "unexpected data"


def owned_for(client: Any, key: Any, default: float) -> Optional["Owned"]:
    """A connection of the library's own for a bound hold on ``key``; None for an object that
    is not a redis-py client (a stand-in without a pool): its requests go through it."""
    if not isinstance(client, redis_py.RedisCluster) and getattr(client, "connection_pool", None) is None:
        return None
    return Owned(client, key, default)


class Owned:
    """One connection of the library's own for one bound hold (see the module)."""

    def __init__(self, client: Any, key: Any, default: float) -> None:
        self._client = client
        self._key = key
        self._class, self._kwargs = settings(client, key)
        self._conn = self._class(**self._kwargs)
        self._asking = False
        #: The bound of a command that has no other (a direct acquire): the lease.
        self.default = default
        self.pid = os.getpid()
        self._mutex = threading.Lock()
        #: A command is out on it (the watcher leaves it alone meanwhile).
        self.busy = False
        #: A hold was granted on it: from now on it is never opened again.
        self.pinned = False
        self.dead = False
        self.registered = False
        self.sock: Any = None
        self._on_close: Optional[Callable[[], None]] = None
        #: When a command last went out on it (the monotonic clock), and the keep-alive PINGs
        #: sent whose replies are still to be read.
        self.last_used = time.monotonic()
        self.pings = 0

    def usable(self) -> bool:
        return not self.dead and self.pid == os.getpid()

    def call(self, req: Send) -> Any:
        """``req`` on this connection; before a grant a connection that failed is opened again
        (a wait sent once more) and a Cluster redirect moves it to the node named; after the
        grant a failure other than the server's answer is the end of the hold."""
        with self._mutex:
            if self.pinned and self.usable() and getattr(self._conn, "_sock", None) is None:
                self._end(signal=True)  # closed under the hold: it is not opened again
            if not self.usable():
                raise ConnectionError("the hold's connection is closed")
            watcher().pause(self)
            try:
                self._read_pongs(self.default)
                reply, fit = exchange(self._conn, req, self.default, self._asking)
            except (MovedError, AskError) as err:
                if not self.pinned:
                    self._redirect(err)
                raise
            except ResponseError:
                raise
            except BaseException:
                self._failed()
                raise
            finally:
                self.last_used = time.monotonic()
                watcher().resume(self)
            if not fit:  # a follow-up without an answer: the connection was closed
                self._failed()
            return reply

    def _read_pongs(self, bound: Optional[float], waiting: bool = True) -> None:
        """The replies of the keep-alive PINGs sent, read (under ``_mutex``): before a command,
        waiting up to ``bound`` for each; from the watcher, only those already arrived."""
        while self.pings:
            if not waiting and not self._conn.can_read(timeout=0):
                return
            self._conn.read_response(timeout=bound)
            self.pings -= 1

    def keepalive(self, now: float) -> None:
        """From the watcher: a PING if nothing went out for ``KEEPALIVE`` seconds, unless a
        command is out (it keeps the connection active itself) or one is still unanswered."""
        if self.pings or now - self.last_used < KEEPALIVE or not self._mutex.acquire(blocking=False):
            return
        failed = False
        try:
            if not self.dead and self.usable() and getattr(self._conn, "_sock", None) is not None:
                self._conn.send_command("PING")
                self.pings += 1
                self.last_used = now
        except Exception:  # it could not be written: the connection is closed
            failed = True
        finally:
            self._mutex.release()
        if failed:
            self._end(signal=True)

    def take_pongs(self) -> None:
        """From the watcher, the socket readable with PINGs unanswered: their replies read (a
        command running meanwhile reads them first itself); a failure is the end of the hold."""
        if not self._mutex.acquire(blocking=False):
            return
        failed = False
        try:
            if not self.dead and self.usable():
                self._read_pongs(KEEPALIVE, waiting=False)
        except Exception:  # the server closed it, or answered what nobody asked
            failed = True
        finally:
            self._mutex.release()
        if failed:
            self._end(signal=True)

    def _redirect(self, err: ResponseError) -> None:
        if not isinstance(self._client, redis_py.RedisCluster):
            return
        client: Any = self._client
        node = None
        if isinstance(err, AskError):
            node = client.get_node(host=err.host, port=err.port)
        else:
            try:
                client.nodes_manager.initialize()
            except Exception:  # no node answers now: the next try asks again
                pass
        self._conn.disconnect()
        self._class, self._kwargs = settings(client, self._key, node)
        self._conn = self._class(**self._kwargs)
        self._asking = node is not None

    def _failed(self) -> None:
        if self.pinned:
            self._end(signal=True)

    def watch(self, on_close: Callable[[], None]) -> None:
        """The hold was granted on this connection: from now on its close is ``on_close()``."""
        self._asking = False
        self.pinned = True
        self._on_close = on_close
        self.sock = getattr(self._conn, "_sock", None)
        if self.sock is None:  # closed before the hold was taken on: gone already
            self._end(signal=True)
            return
        watcher().add(self)

    def interrupt(self) -> None:
        """From another thread: the command out on it (a wait) ends at once, its socket shut
        down; the thread that sent it sees the connection closed. A hold granted on it
        meanwhile is lost (the watcher tells, as for any close)."""
        sock = getattr(self._conn, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed already
                pass

    def lost_connection(self) -> None:
        """The watcher saw the socket closed."""
        self._end(signal=True)

    def close(self) -> None:
        """The hold ended: the connection is closed (nothing more is signalled)."""
        self._end(signal=False)

    def _end(self, signal: bool) -> None:
        with watcher().mutex:
            if self.dead:
                return
            self.dead = True
        watcher().remove(self)
        if self.pid == os.getpid():
            try:
                self._conn.disconnect()
            except Exception:  # closing a broken connection may fail; it is gone
                pass
        callback, self._on_close = self._on_close, None
        if signal and callback is not None:
            callback()


class _Watcher:
    """The thread that waits on the sockets of every bound hold of the process between their
    commands, and tells a hold whose socket reports a close."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.mutex = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.watched: Set[Owned] = set()
        self.thread: Optional[threading.Thread] = None

    def add(self, owned: Owned) -> None:
        with self.mutex:
            if owned.dead:
                return
            self.watched.add(owned)
            self._register(owned)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="redislock-watch", daemon=True)
                self.thread.start()

    def remove(self, owned: Owned) -> None:
        with self.mutex:
            self._unregister(owned)
            self.watched.discard(owned)
        self._wake()

    def pause(self, owned: Owned) -> None:
        """A command goes out on ``owned``: its reply is the command's to read."""
        with self.mutex:
            owned.busy = True

    def resume(self, owned: Owned) -> None:
        with self.mutex:
            owned.busy = False
            if owned in self.watched and not owned.dead:
                self._register(owned)

    def _register(self, owned: Owned) -> None:
        if not owned.registered:
            self.selector.register(owned.sock, selectors.EVENT_READ, owned)
            owned.registered = True

    def _unregister(self, owned: Owned) -> None:
        if owned.registered:
            owned.registered = False
            try:
                self.selector.unregister(owned.sock)
            except (KeyError, ValueError):  # closed meanwhile: unknown to the selector now
                pass

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:  # the pipe is full: the thread is woken already
            pass

    def _run(self) -> None:
        while True:
            with self.mutex:
                if not self.watched:
                    self.thread = None
                    return
            ready = self.selector.select(KEEPALIVE / 4)
            closed: List[Owned] = []
            answered: List[Owned] = []
            with self.mutex:
                for key, _ in ready:
                    owned = key.data
                    if owned is None:
                        self._drain()
                    elif owned in self.watched and owned.registered and not owned.dead:
                        if owned.busy:  # a reply: not ours to read; looked at again after it
                            self._unregister(owned)
                        elif owned.pings:  # a keep-alive's PONG (or the close after it)
                            answered.append(owned)
                        elif probe(owned.sock) is not None:
                            self._unregister(owned)
                            self.watched.discard(owned)
                            closed.append(owned)
                idle = list(self.watched)
            for owned in closed:
                owned.lost_connection()
            for owned in answered:
                owned.take_pongs()
            now = time.monotonic()
            for owned in idle:
                owned.keepalive(now)

    def _drain(self) -> None:
        try:
            while self.wake_r.recv(512):
                pass
        except OSError:  # drained
            pass


_watcher: Optional[_Watcher] = None
_watcher_mutex = threading.Lock()


def watcher() -> _Watcher:
    """The process's watcher (a forked child makes its own)."""
    global _watcher
    with _watcher_mutex:
        if _watcher is None or _watcher.pid != os.getpid():
            _watcher = _Watcher()
        return _watcher


def carrier(plain: Callable[[Request], Any], owned: Optional[Owned]) -> Callable[[Request], Any]:
    """The front end's ``carry`` for a flow of a bound hold: a request for the hold's connection
    (``Send.own``) goes on ``owned`` while it is open, anything else (or once it is closed: a
    release after a loss) as usual. A hold whose key left the node (a Cluster's slot moved: the
    binding stayed behind) leaves the connection, and its requests follow the key."""

    def carry(request: Request) -> Any:
        if isinstance(request, Send) and request.own and owned is not None and owned.usable():
            try:
                return owned.call(request)
            except (MovedError, AskError):
                if not owned.pinned:
                    raise
                owned.close()
        return plain(request)

    return carry

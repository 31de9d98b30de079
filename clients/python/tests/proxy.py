"""A fault-injection TCP proxy on loopback, between the clients and a test server: it can
black-hole the traffic (a partition: sockets stay open, bytes stop, and flow again on heal, as
TCP retransmits them), cut every connection, or delay each chunk (a slow network).

It runs an asyncio loop on a thread of its own, so sync and asyncio tests use it alike.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Set


class Proxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._streams: Set[Any] = set()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(5)
        self.port: int = self._server.sockets[0].getsockname()[1]

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._open = asyncio.Event()
        self._open.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        ready.set()
        self._loop.run_forever()

    async def _accept(self, reader: Any, writer: Any) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._streams.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: Any, writer: Any) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()  # black-holed: hold the bytes until healed
                if self.delay:
                    await asyncio.sleep(self.delay)  # the injected latency itself
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._streams.discard(writer)
            writer.close()

    def _do(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(5)

    def blackhole(self) -> None:
        """A partition: nothing gets through either way until ``heal()``."""
        self._do(self._open.clear)

    def heal(self) -> None:
        self._do(self._open.set)

    def cut(self) -> None:
        """Closes every proxied connection (new ones are still accepted)."""

        def close_all() -> None:
            for w in list(self._streams):
                w.transport.abort()
            self._streams.clear()

        self._do(close_all)

    def slow(self, seconds: float) -> None:
        """Delays every chunk by ``seconds``, each way."""
        self.delay = seconds

    def close(self) -> None:
        self.heal()
        self.cut()

        async def shutdown() -> None:
            # Every piping task ends before the loop stops, so none is left pending at exit.
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

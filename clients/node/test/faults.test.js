// The locker where networks fail, with ioredis and with node-redis at their default settings:
// through a fault-injection proxy (partition, cut, slow), with a killed server. Leases are short
// (1200 ms) so that every test ends within a few seconds. What must hold: using()'s signal
// aborts before any other client can be granted the lock, no wait outlives its timeout by more
// than 500 ms, nothing hangs, and the locker's own connections print nothing.
"use strict";

const { test, describe, before, after, beforeEach, afterEach } = require("node:test");
const assert = require("node:assert/strict");

const { Locker, LockError, LockLostError, LockTimeoutError } = require("..");
const { Server, LIBRARIES } = require("./servers");
const { Proxy } = require("./proxy");

const LEASE = 1200;
// A loaded machine wakes a timer late by tens of ms: the bounds below allow that much. (When the
// lease clock ends a hold is checked exactly by the core's own tests.)
const SCHEDULING_MS = 100;

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

async function waitFor(predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 5)); // polling server state: no event to await
  }
}

/** The lock's client at the library's defaults (only an 'error' listener, as applications have). */
async function connectDefault(lib, port) {
  if (lib.name === "ioredis") {
    const Redis = require("ioredis");
    const c = new Redis({ host: "127.0.0.1", port });
    c.on("error", () => {});
    await c.ping();
    return c;
  }
  const { createClient } = require("redis");
  const c = createClient({ socket: { host: "127.0.0.1", port } });
  c.on("error", () => {});
  await c.connect();
  return c;
}

function disconnect(lib, c) {
  if (lib.name === "ioredis") c.disconnect();
  else (c.destroy ? c.destroy() : c.disconnect());
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms)); // elapsed time itself is what is tested

for (const lib of LIBRARIES) {
  describe(`${lib.name} under faults`, () => {
    let direct; // a client straight to the server, not through the proxy
    let other; // another locker, on it
    let proxy;
    let client;
    let locker;
    const key = (k) => `${lib.name}:f:${k}`;
    const blocked = async () => {
      const list = String(await lib.call(direct, "CLIENT", "LIST"));
      return list
        .split("\n")
        .filter((l) => / cmd=lock\.acquire /.test(l) && / flags=\S*b/.test(l))
        .map((l) => l.match(/id=(\d+)/)[1]);
    };
    // A waiting connection not in `seen`: connections are told apart by id, whenever the server
    // notices that a cut one closed.
    const newWaiter = async (seen) => (await blocked()).some((id) => !seen.includes(id));

    before(async () => {
      direct = await lib.connect(server.port);
      other = new Locker(direct);
    });
    after(async () => {
      await other.quit();
      await lib.close(direct);
    });
    beforeEach(async () => {
      proxy = await Proxy.start(server.port);
      client = await connectDefault(lib, proxy.port);
      locker = new Locker(client);
    });
    afterEach(async () => {
      proxy.heal();
      await locker.quit();
      disconnect(lib, client);
      await proxy.close();
    });

    test("a partition under using(): the signal aborts before another client is granted", async () => {
      const at = {};
      const result = locker.using(key("hold"), LEASE, async (signal, hold) => {
        proxy.blackhole();
        at.partition = performance.now();
        const granted = other.acquire(key("hold"), 10000, { wait: 4000 }).then((h) => {
          at.granted = performance.now();
          return h;
        });
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        at.aborted = performance.now();
        assert.ok(signal.reason instanceof LockLostError);
        at.leaseEnd = hold.leaseEnd; // the lease clock's end, on the clock the client uses
        (await granted).release();
        at.routineEnd = performance.now();
        return "done";
      });
      assert.equal(await result, "done");
      at.settled = performance.now();
      // The lease clock ran out before the other client was granted, within a lease of the
      // partition (its last renewal was sent before it); when the signal's callback ran is up to
      // the scheduler.
      assert.ok(at.leaseEnd < at.granted, JSON.stringify(at));
      assert.ok(at.leaseEnd - at.partition < LEASE, JSON.stringify(at));
      // using() settles once the routine ends, the release bounded even though unanswered.
      assert.ok(at.settled - at.routineEnd < 1500, JSON.stringify(at));
    });

    test("a slow network (200 ms each way) keeps the lease", async () => {
      proxy.slow(200);
      await locker.using(key("slow"), LEASE, { wait: 3000 }, async (signal) => {
        await sleep(1.5 * LEASE);
        assert.equal(signal.aborted, false);
        assert.equal(await other.tryAcquire(key("slow"), 1000), null);
      });
      assert.equal(await other.info(key("slow")), null);
    });

    test("a waited grant gets its full lease", async () => {
      const holder = await other.acquire(key("after"), 10000);
      setTimeout(() => holder.release(), 1500); // a wait longer than the lease
      const hold = await locker.acquire(key("after"), LEASE, { wait: 4000 });
      assert.ok(hold.expiration > Date.now() + LEASE - 200, `${hold.expiration - Date.now()} ms left`);
      assert.ok(hold.leaseLeft > LEASE - 200);
      await hold.release();
    });

    test("an AbortSignal ends a wait and leaves no waiter", async () => {
      const holder = await other.acquire(key("abort"), 10000);
      const controller = new AbortController();
      const waiting = locker.acquire(key("abort"), 10000, { wait: 5000, signal: controller.signal });
      await waitFor(async () => (await other.info(key("abort"))).waiters === 1);
      const reason = new Error("no longer needed");
      controller.abort(reason);
      await assert.rejects(waiting, (err) => err === reason);
      const aborted = Date.now();
      await waitFor(async () => (await other.info(key("abort"))).waiters === 0, 100);
      assert.ok(Date.now() - aborted <= 100);
      // An aborted signal refuses at once.
      await assert.rejects(locker.tryAcquire(key("abort"), 1000, { wait: 1000, signal: controller.signal }), (err) => err === reason);
      await holder.release();
    });

    test("an aborted wait rejects only once the server dropped the waiter", async () => {
      // 50 ms each way, closes included: a rejection before the server dropped the waiter shows.
      proxy.slow(50, { closes: true });
      const holder = await other.acquire(key("unblock"), 10000);
      const reason = new Error("no longer needed");
      const controller = new AbortController();
      const waiting = locker.acquire(key("unblock"), 10000, { wait: 5000, signal: controller.signal });
      await waitFor(async () => (await other.info(key("unblock"))).waiters === 1);
      controller.abort(reason);
      await assert.rejects(waiting, (err) => err === reason);
      assert.equal((await other.info(key("unblock"))).waiters, 0, "rejected before the server dropped the waiter");
      // The same, with a wait that has not reached the server yet when it is aborted.
      const early = new AbortController();
      const sent = locker.acquire(key("unblock"), 10000, { wait: 5000, signal: early.signal });
      setImmediate(() => early.abort(reason));
      await assert.rejects(sent, (err) => err === reason);
      assert.equal((await other.info(key("unblock"))).waiters, 0, "a waiter was left in the queue");
      await holder.release();
      assert.equal(await other.info(key("unblock")), null, "an aborted wait was granted the lock");
    });

    test("quit() ends the waits in progress", async () => {
      const holder = await other.acquire(key("quit"), 10000);
      const waiting = locker.acquire(key("quit"), 10000, { wait: 5000 });
      await waitFor(async () => (await other.info(key("quit"))).waiters === 1);
      const started = Date.now();
      const rejected = assert.rejects(waiting, LockError);
      await locker.quit();
      await rejected;
      assert.ok(Date.now() - started < 500);
      await waitFor(async () => (await other.info(key("quit"))).waiters === 0, 100);
      await holder.release();
      assert.equal(await other.info(key("quit")), null, "a closed locker was granted the lock");
    });

    test("a wait whose connection is cut is queued again once, within its timeout", async () => {
      const holder = await other.acquire(key("cut"), 10000);
      let started = Date.now();
      const waiting = locker.tryAcquire(key("cut"), 10000, { wait: 1500 });
      await waitFor(() => newWaiter([]));
      let seen = await blocked();
      proxy.cut();
      await waitFor(() => newWaiter(seen)); // queued again
      assert.equal(await waiting, null);
      assert.ok(Date.now() - started < 2000, `${Date.now() - started} ms`);
      // Cut twice: a LockError, not a raw socket error.
      seen = await blocked();
      started = Date.now();
      const again = locker.tryAcquire(key("cut"), 10000, { wait: 1500 });
      await waitFor(() => newWaiter(seen));
      seen = await blocked();
      proxy.cut();
      await waitFor(() => newWaiter(seen));
      proxy.cut();
      await assert.rejects(again, (err) => err instanceof LockError && !(err instanceof LockTimeoutError));
      assert.ok(Date.now() - started < 2000);
      await holder.release();
    });

    test("a partition during a wait ends with the wait", async () => {
      const holder = await other.acquire(key("pwait"), 10000);
      await locker.info(key("pwait")); // connected before the partition
      proxy.blackhole();
      const started = Date.now();
      await assert.rejects(locker.tryAcquire(key("pwait"), 10000, { wait: 1000 }), LockTimeoutError);
      assert.ok(Date.now() - started < 1500 + SCHEDULING_MS, `${Date.now() - started} ms`);
      await holder.release();
    });

    test("renewals do not queue behind the application's own blocking command", async () => {
      await locker.using(key("blpop"), 600, async (signal) => {
        if (lib.name === "ioredis") await client.blpop(key("nothing"), 1.5);
        else await client.sendCommand(["BLPOP", key("nothing"), "1.5"]);
        assert.equal(signal.aborted, false);
        assert.equal(await other.tryAcquire(key("blpop"), 1000), null);
      });
    });
  });

  describe(`${lib.name} with a killed server`, () => {
    test("using() aborts at the lease end and the locker's connections print nothing", async () => {
      const own = await Server.start();
      const printed = [];
      const { error } = console;
      console.error = (...args) => printed.push(args.join(" "));
      const client = await connectDefault(lib, own.port);
      const locker = new Locker(client);
      try {
        const at = {};
        await locker.using(key0(lib, "kill"), LEASE, async (signal, hold) => {
          await own.stop();
          at.killed = performance.now();
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          at.aborted = performance.now();
          at.leaseEnd = hold.leaseEnd;
        });
        at.settled = performance.now();
        assert.ok(at.leaseEnd - at.killed < LEASE, JSON.stringify(at)); // no renewal answered after the kill
        assert.ok(at.settled - at.aborted < 1500, JSON.stringify(at));
        await sleep(300); // reconnection attempts happen meanwhile: what is being tested
      } finally {
        await locker.quit();
        disconnect(lib, client);
        console.error = error;
        await own.stop();
      }
      assert.deepEqual(printed, []);
    });
  });
}

function key0(lib, k) {
  return `${lib.name}:f:${k}`;
}

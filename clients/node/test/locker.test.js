// The Node.js client against a real server, with ioredis and with node-redis.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");
const net = require("node:net");

const { Locker, Hold, LockBusyError, LockLostError, UnsupportedError, StaleFenceError } = require("..");
const { Server, LIBRARIES } = require("./servers");

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

/** The fence of LOCK.INFO read off the wire as text, with no client library in between. */
function rawFence(port, name) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, "127.0.0.1", () => sock.write(`LOCK.INFO ${name}\r\n`));
    let data = "";
    sock.on("data", (d) => {
      data += d;
      const m = data.match(/fence\r\n:(\d+)\r\n/);
      if (m) {
        sock.destroy();
        resolve(BigInt(m[1]));
      }
    });
    sock.on("error", reject);
  });
}

async function waitFor(predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 5)); // polling server state: no event to await
  }
}

for (const lib of LIBRARIES) {
  describe(lib.name, () => {
    let client;
    let locker;
    before(async () => {
      client = await lib.connect(server.port);
      locker = new Locker(client);
    });
    after(async () => {
      await locker.quit();
      await lib.close(client);
    });
    const key = (k) => `${lib.name}:${k}`;

    test("acquire, fence as bigint, extend, release", async () => {
      const hold = await locker.acquire(key("a"), 10000);
      assert.ok(hold instanceof Hold);
      assert.equal(typeof hold.fence, "bigint");
      assert.ok(hold.fence > 0n);
      assert.match(hold.token, /^[0-9a-f]{32}$/);
      const info = await locker.info(key("a"));
      assert.equal(info.token, hold.token);
      assert.equal(info.fence, hold.fence);
      assert.ok(info.ttl > 9000 && info.ttl <= 10000);
      assert.equal(info.waiters, 0);
      assert.equal(await hold.extend(20000), hold);
      assert.ok((await locker.info(key("a"))).ttl > 19000);
      assert.ok(hold.expiration > Date.now() + 19000);
      assert.equal(await hold.release(), true);
      assert.equal(await hold.release(), false);
      assert.equal(await locker.info(key("a")), null);
    });

    test("busy: LockBusyError, or null from tryAcquire", async () => {
      const hold = await locker.acquire(key("b"), 10000);
      await assert.rejects(locker.acquire(key("b"), 10000), LockBusyError);
      assert.equal(await locker.tryAcquire(key("b"), 10000), null);
      const started = Date.now();
      await assert.rejects(locker.acquire(key("b"), 10000, { wait: 200 }), LockBusyError);
      assert.ok(Date.now() - started >= 150);
      await hold.release();
    });

    test("the same token re-grants with the same fence", async () => {
      const hold = await locker.acquire(key("c"), 10000, { token: "worker-1" });
      const again = await locker.acquire(key("c"), 10000, { token: "worker-1" });
      assert.equal(again.fence, hold.fence);
      await hold.release();
    });

    test("waiting in the server: first come, first served, on a connection of its own", async () => {
      const hold = await locker.acquire(key("d"), 10000);
      const first = locker.acquire(key("d"), 10000, { wait: 10000 });
      await waitFor(async () => (await locker.info(key("d"))).waiters === 1);
      const second = locker.acquire(key("d"), 10000, { wait: Infinity });
      await waitFor(async () => (await locker.info(key("d"))).waiters === 2);
      // The client given to the locker is not blocked meanwhile.
      assert.equal(String(await lib.call(client, "PING")), "PONG");
      await hold.release();
      const a = await first;
      assert.ok(a.fence > hold.fence);
      await a.release();
      const b = await second;
      assert.ok(b.fence > a.fence);
      await b.release();
    });

    test("extend after the hold is gone: LockLostError", async () => {
      const hold = await locker.acquire(key("e"), 10000);
      await lib.call(client, "DEL", key("e"));
      await assert.rejects(hold.extend(), LockLostError);
      assert.equal(await hold.release(), false);
    });

    test("using(): renews the lease and releases at the end", async () => {
      const before = await locker.info(key("f"));
      assert.equal(before, null);
      let fence;
      const result = await locker.using(key("f"), 300, async (signal, hold) => {
        fence = hold.fence;
        // Three leases' worth of time: the renewals keep it.
        await new Promise((r) => setTimeout(r, 900)); // the work this routine stands for
        assert.equal(signal.aborted, false);
        const info = await locker.info(key("f"));
        assert.equal(info.fence, fence);
        return "done";
      });
      assert.equal(result, "done");
      assert.equal(await locker.info(key("f")), null);
    });

    test("using(): the signal aborts the moment the hold is lost", async () => {
      const reason = await locker.using(key("g"), 300, async (signal) => {
        await lib.call(client, "DEL", key("g"));
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        return signal.reason;
      });
      assert.ok(reason instanceof LockLostError);
    });

    test("fences past 2^53 stay exact", async () => {
      // Five promotions (REPLICAOF a master that is not there, then NO ONE) move the fence
      // clock to epoch 5: fences above 2^53, where JavaScript numbers lose digits.
      for (let i = 0; i < 5; i++) {
        await lib.call(client, "REPLICAOF", "127.0.0.1", "1");
        await lib.call(client, "REPLICAOF", "NO", "ONE");
      }
      const hold = await locker.acquire(key("h"), 10000, { token: "big" });
      assert.ok(hold.fence > 2n ** 53n, `fence ${hold.fence}`);
      assert.equal(hold.fence, await rawFence(server.port, key("h")));
      assert.equal((await locker.info(key("h"))).fence, hold.fence);
      assert.equal((await locker.acquire(key("h"), 10000, { token: "big" })).fence, hold.fence);
      await hold.release();
    });

    test("arguments are checked", async () => {
      await assert.rejects(locker.acquire(key("i"), 0), RangeError);
      await assert.rejects(locker.acquire(key("i"), 1000, { shared: true, limit: 2 }), RangeError);
      assert.throws(() => new Locker({}), TypeError);
    });

    test("wave 2 options: skipped until the server has them", async (t) => {
      const shared = await locker.tryAcquire(key("j"), 1000, { shared: true }).then(
        (h) => h,
        (e) => e,
      );
      if (shared instanceof UnsupportedError) {
        t.skip("this server's redislock has no SHARED option yet");
        return;
      }
      assert.ok(shared instanceof Hold);
      await shared.release();
    });

    test("LOCK.CALL and LOCK.FENCE: skipped until the server has them", async (t) => {
      if (!(await locker.supports("LOCK.CALL")) || !(await locker.supports("LOCK.FENCE"))) {
        const hold = await locker.acquire(key("{k}"), 1000);
        await assert.rejects(hold.call("SET", key("{k}:v"), "1"), UnsupportedError);
        await hold.release();
        t.skip("this server's redislock has no LOCK.CALL / LOCK.FENCE yet");
        return;
      }
      const hold = await locker.acquire(key("{k}"), 10000);
      await hold.call("SET", key("{k}:v"), "1");
      await hold.release();
      await assert.rejects(hold.call("SET", key("{k}:v"), "2"), LockLostError);
      await locker.fenced(key("gate"), hold.fence, "SET", key("{gate}:v"), "1");
      await assert.rejects(locker.fenced(key("gate"), hold.fence - 1n, "SET", key("{gate}:v"), "2"), StaleFenceError);
    });
  });
}

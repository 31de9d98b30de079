// The Node.js client against a real server, with ioredis and with node-redis.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");
const net = require("node:net");

const { Locker, Hold, LockError, LockBusyError, LockLostError, LockKindError, UnsupportedError, StaleFenceError } = require("..");
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

const owned = (hold) => hold.owned();

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
      for (const limit of [0, -1, 1.5, 1000001]) await assert.rejects(locker.acquire(key("i"), 1000, { limit }), RangeError);
      assert.throws(() => new Locker({}), TypeError);
    });

    test("arguments of the wrong type: a TypeError that names the value as given", async () => {
      await assert.rejects(locker.acquire(key("t"), "1000"), (e) => e instanceof TypeError && e.message.includes('"1000" (a string)'));
      await assert.rejects(locker.acquire(key("t"), 1000, { wait: "500" }), (e) => e instanceof TypeError && e.message.includes('"500"'));
      for (const name of [undefined, null, 42]) {
        await assert.rejects(locker.acquire(name, 1000), (e) => e instanceof TypeError && e.message.includes(String(name)));
      }
      assert.equal(Number(await lib.call(client, "EXISTS", "undefined", "null", "42")), 0, "a key was locked by a name that was not given");
      await assert.rejects(locker.fenced(key("tg"), undefined, "SET", key("{tg}"), "1"), (e) => e instanceof TypeError && /fence .*undefined/.test(e.message));
      await assert.rejects(locker.fenced(key("tg"), 1.5, "SET", key("{tg}"), "1"), TypeError);
      await assert.rejects(locker.fenced(key("tg"), "12a", "SET", key("{tg}"), "1"), TypeError);
    });

    test("the command inside call() and fenced() answers as the client library does", async () => {
      const hold = await locker.acquire(key("{in}"), 10000);
      await lib.call(client, "SET", key("{in}:direct"), "v");
      await lib.call(client, "HSET", key("{in}:hash"), "f", "1");
      assert.equal(await hold.call("SET", key("{in}:s"), "v"), await lib.call(client, "SET", key("{in}:direct"), "v"));
      const got = await hold.call("GET", key("{in}:s"));
      assert.equal(typeof got, "string");
      assert.deepEqual(got, await lib.call(client, "GET", key("{in}:direct")));
      assert.deepEqual(await hold.call("INCR", key("{in}:n")), await lib.call(client, "INCR", key("{in}:m")));
      assert.deepEqual(await hold.call("GET", key("{in}:none")), await lib.call(client, "GET", key("{in}:none")));
      const direct = async (...args) => lib.call(client, ...args).then(() => assert.fail("answered"), (e) => e);
      const inner = async (p) => p.then(() => assert.fail("answered"), (e) => e);
      for (const [ours, theirs] of [
        [await inner(hold.call("NOSUCH")), await direct("NOSUCH")],
        [await inner(hold.call("INCR", key("{in}:hash"))), await direct("INCR", key("{in}:hash"))],
        [await inner(locker.fenced(key("{in}:gate"), hold.fence, "NOSUCH")), await direct("NOSUCH")],
      ]) {
        assert.ok(!(ours instanceof LockError), `${ours.name}: ${ours.message}`);
        assert.equal(ours.constructor, theirs.constructor);
        assert.equal(ours.message.split(" ")[0], theirs.message.split(" ")[0]);
      }
      assert.equal(await owned(hold), true, "an inner error said nothing of the hold");
      await hold.release();
      await assert.rejects(hold.call("GET", key("{in}:s")), LockLostError);
      assert.deepEqual(await locker.fenced(key("{in}:gate"), hold.fence, "INCR", key("{in}:n")), await lib.call(client, "INCR", key("{in}:m")));
      await assert.rejects(locker.fenced(key("{in}:gate"), hold.fence - 1n, "SET", key("{in}:s"), "w"), StaleFenceError);
    });

    test("a plain acquire has a lease clock: its end comes before anyone else is granted; signal and onLost once", async () => {
      const lost = [];
      const at = {};
      const hold = await locker.acquire(key("clock"), 300, { onLost: (err, h) => lost.push([err, h]) });
      assert.equal(hold.signal.aborted, false);
      // The lease's local end, on the clock the client uses (performance.now()).
      at.leaseEnd = hold.leaseEnd;
      const other = new Locker(client);
      try {
        const granted = other.acquire(key("clock"), 10000, { wait: 5000 }).then((h) => {
          at.granted = performance.now();
          return h;
        });
        await new Promise((resolve) => hold.signal.addEventListener("abort", resolve, { once: true }));
        assert.ok(hold.signal.reason instanceof LockLostError);
        assert.equal(lost.length, 1);
        assert.equal(lost[0][0], hold.signal.reason);
        assert.equal(lost[0][1], hold);
        assert.equal(hold.leaseLeft, 0);
        await (await granted).release();
        // Lost at the end of its lease clock, which no renewal moved; that end comes before the
        // other client's grant (when the signal's callback ran is up to the scheduler).
        assert.equal(hold.leaseEnd, at.leaseEnd);
        assert.ok(at.leaseEnd < at.granted, JSON.stringify(at));
        assert.equal(lost.length, 1);
        assert.equal(await hold.release(), false);
        // A renewal that finds the hold gone signals it too; a released hold never does.
        const deleted = await locker.acquire(key("clock2"), 10000);
        await lib.call(client, "DEL", key("clock2"));
        await assert.rejects(deleted.extend(), LockLostError);
        assert.ok(deleted.signal.reason instanceof LockLostError);
        const released = await locker.acquire(key("clock3"), 10000);
        await released.release();
        assert.equal(released.signal.aborted, false);
      } finally {
        await other.quit();
      }
    });

    test("a lease longer than a timer can wait (2^31 ms) does not wake the process", async () => {
      const set = globalThis.setTimeout;
      let timers = 0;
      globalThis.setTimeout = (...args) => {
        timers++;
        return set(...args);
      };
      try {
        await locker.using(key("long"), 30 * 24 * 3600 * 1000, async (signal) => {
          timers = 0;
          await new Promise((r) => set(r, 100)); // the time that passes is what is tested
          assert.equal(signal.aborted, false);
        });
      } finally {
        globalThis.setTimeout = set;
      }
      assert.ok(timers < 5, `${timers} timers set in 100 ms`);
    });

    test("1,000 holds, renewed or not, add no timer: one loop serves them all", async () => {
      // Counts the timers alive (set, not fired, not cleared) in this process.
      const live = new Set();
      const { setTimeout: set, clearTimeout: clear } = globalThis;
      globalThis.setTimeout = function (fn, ...rest) {
        const t = set(function (...a) {
          live.delete(t);
          return fn.apply(this, a);
        }, ...rest);
        live.add(t);
        return t;
      };
      globalThis.clearTimeout = (t) => {
        live.delete(t);
        return clear(t);
      };
      const holds = [];
      let open;
      const gate = new Promise((resolve) => (open = resolve));
      let started = 0;
      let allStarted;
      const running = new Promise((resolve) => (allStarted = resolve));
      const routines = [];
      let during;
      let before;
      try {
        await (await locker.acquire(key("warm"), 60000)).release();
        before = live.size;
        for (let i = 0; i < 1000; i++) {
          routines.push(
            locker.using(key(`many:${i}`), 60000, async () => {
              if (++started === 1000) allStarted();
              await gate;
            }),
          );
        }
        for (let i = 0; i < 1000; i++) holds.push(locker.acquire(key(`plain:${i}`), 60000, { onLost: () => {} }));
        await Promise.all(holds);
        await running;
        during = live.size;
      } finally {
        globalThis.setTimeout = set;
        globalThis.clearTimeout = clear;
        open();
        await Promise.all(routines);
        await Promise.all((await Promise.all(holds)).map((h) => h.release()));
      }
      assert.ok(during - before <= 1, `${during - before} timers for 2,000 holds`);
    });

    test("shared holds: many readers, each with its own token, fence and lease", async () => {
      const readers = [];
      for (const ttl of [10000, 20000, 30000]) readers.push(await locker.acquire(key("rw"), ttl, { shared: true }));
      const fences = readers.map((h) => h.fence);
      assert.ok(fences[0] < fences[1] && fences[1] < fences[2]);
      assert.equal(await locker.tryAcquire(key("rw"), 10000), null);
      const info = await locker.info(key("rw"));
      assert.equal(info.mode, "shared");
      assert.equal(info.token, undefined);
      assert.equal(info.limit, undefined);
      assert.deepEqual(info.holders.map((h) => h.token), readers.map((h) => h.token));
      assert.deepEqual(info.holders.map((h) => h.fence), fences);
      assert.equal(typeof info.holders[0].fence, "bigint");
      assert.ok(info.holders[0].ttl > 9000 && info.holders[0].ttl <= 10000);
      assert.ok(info.ttl > 29000 && info.ttl <= 30000, "the key's TTL is the latest lease");
      assert.deepEqual(info.holders.map((h) => h.client), [0, 0, 0]);
      for (const h of readers) assert.equal(await h.owned(), true);
      await readers[2].extend(5000);
      assert.ok((await locker.info(key("rw"))).ttl <= 20000);
      for (const h of readers) assert.equal(await h.release(), true);
      assert.equal(await readers[0].owned(), false);
      assert.equal(await locker.info(key("rw")), null);
    });

    test("a waiting writer goes before later readers, and readers behind it wait for it", async () => {
      const reader = await locker.acquire(key("w"), 10000, { shared: true });
      const writer = locker.acquire(key("w"), 10000, { wait: 10000 });
      await waitFor(async () => (await locker.info(key("w"))).waiters === 1);
      assert.equal(await locker.tryAcquire(key("w"), 10000, { shared: true }), null);
      const behind = locker.acquire(key("w"), 10000, { shared: true, wait: 10000 });
      await waitFor(async () => (await locker.info(key("w"))).waiters === 2);
      await reader.release();
      const w = await writer;
      assert.ok(w.fence > reader.fence);
      const info = await locker.info(key("w"));
      assert.equal(info.mode, "exclusive");
      assert.equal(info.token, w.token);
      assert.equal(info.fence, w.fence);
      assert.deepEqual(info.holders.map((h) => [h.token, h.fence]), [[w.token, w.fence]]);
      assert.equal(info.waiters, 1);
      await w.release();
      const r = await behind;
      assert.ok(r.fence > w.fence);
      assert.equal((await locker.info(key("w"))).mode, "shared");
      await r.release();
    });

    test("a semaphore grants at most its limit; a lease that ends hands its place on", async () => {
      const a = await locker.acquire(key("sem"), 300, { limit: 2 });
      const b = await locker.acquire(key("sem"), 10000, { limit: 2 });
      assert.equal(await locker.tryAcquire(key("sem"), 10000, { limit: 2 }), null);
      const info = await locker.info(key("sem"));
      assert.equal(info.mode, "semaphore");
      assert.equal(info.limit, 2);
      assert.deepEqual(info.holders.map((h) => h.token), [a.token, b.token]);
      const started = Date.now();
      const c = await locker.acquire(key("sem"), 10000, { limit: 2, wait: 5000 });
      assert.ok(Date.now() - started >= 150, "granted before the lease ended");
      assert.equal(await a.owned(), false);
      assert.equal(await a.release(), false);
      assert.ok(c.fence > b.fence);
      await b.release();
      await c.release();
      assert.equal(await locker.info(key("sem")), null);
    });

    test("the same token re-grants with the same fence, in every kind", async () => {
      for (const opts of [{}, { shared: true }, { limit: 3 }]) {
        const name = key(`re:${Object.keys(opts).join() || "x"}`);
        const hold = await locker.acquire(name, 10000, { ...opts, token: "worker-1" });
        const again = await locker.acquire(name, 30000, { ...opts, token: "worker-1" });
        assert.equal(again.fence, hold.fence);
        const info = await locker.info(name);
        assert.equal(info.holders.length, 1);
        assert.ok(info.holders[0].ttl > 29000);
        await again.release();
      }
    });

    test("a request that does not fit the key: LockKindError, and nothing changes", async () => {
      const place = await locker.acquire(key("pool"), 10000, { limit: 2 });
      for (const opts of [{ limit: 3 }, {}, { shared: true }, { limit: 1, wait: 5000 }]) {
        const err = await locker.acquire(key("pool"), 10000, opts).then(
          () => assert.fail("granted"),
          (e) => e,
        );
        assert.ok(err instanceof LockKindError && err instanceof LockError, String(err));
        assert.equal(err.limit, 2);
        assert.equal(err.otherMode, false);
        assert.equal(err.lockName, key("pool"));
        assert.match(err.message, /^the key is a semaphore with LIMIT 2/);
      }
      const reader = await locker.acquire(key("rw2"), 10000, { shared: true, token: "reader-1" });
      await assert.rejects(locker.acquire(key("rw2"), 10000, { limit: 2 }), (e) => e instanceof LockKindError && e.limit === undefined);
      await assert.rejects(
        locker.acquire(key("rw2"), 10000, { token: "reader-1" }),
        (e) => e instanceof LockKindError && e.otherMode === true,
      );
      assert.deepEqual((await locker.info(key("pool"))).holders.map((h) => h.token), [place.token]);
      assert.deepEqual((await locker.info(key("rw2"))).holders.map((h) => h.token), ["reader-1"]);
      await place.release();
      await reader.release();
    });

    test("using() and LOCK.CALL with a shared hold", async () => {
      const other = await locker.acquire(key("{u}"), 10000, { shared: true });
      // Renewed every 400 ms: a busy machine's stall of the event loop must not pass for a loss.
      const result = await locker.using(key("{u}"), 1200, { shared: true }, async (signal, hold) => {
        await new Promise((r) => setTimeout(r, 2500)); // past two leases: the renewals keep it
        assert.equal(signal.aborted, false);
        assert.equal(await hold.owned(), true);
        await hold.call("SET", key("{u}:v"), "1");
        return hold.fence;
      });
      assert.ok(result > other.fence);
      assert.deepEqual((await locker.info(key("{u}"))).holders.map((h) => h.token), [other.token]);
      await other.release();
    });

    test("LOCK.CALL and LOCK.FENCE", async () => {
      assert.equal(await locker.supports("LOCK.CALL"), true);
      assert.equal(await locker.supports("LOCK.FENCE"), true);
      const hold = await locker.acquire(key("{k}"), 10000);
      await hold.call("SET", key("{k}:v"), "1");
      await hold.release();
      await assert.rejects(hold.call("SET", key("{k}:v"), "2"), LockLostError);
      await locker.fenced(key("gate"), hold.fence, "SET", key("{gate}:v"), "1");
      await assert.rejects(locker.fenced(key("gate"), hold.fence - 1n, "SET", key("{gate}:v"), "2"), StaleFenceError);
    });
  });
}

// What a server with the previous release of the module answers: no SHARED, LIMIT, EPHEMERAL,
// LOCK.CALL or LOCK.FENCE. A stand-in ioredis client, so that no such server is needed.
describe("a server without the newer options", () => {
  const previousRelease = {
    duplicate() {
      return this;
    },
    async callBuffer(command, ...args) {
      if (/^LOCK\.(CALL|FENCE)$/i.test(command)) throw new Error(`ERR unknown command '${command}', with args beginning with: `);
      const option = args.slice(4).find((a) => /^(SHARED|LIMIT|EPHEMERAL)$/i.test(String(a)));
      if (option) throw new Error(`ERR syntax error: unknown option '${option}'`);
      return [Buffer.from(String(args[1])), "61727287109632"];
    },
    call(command, ...args) {
      return this.callBuffer(command, ...args);
    },
    async quit() {},
  };

  test("their options and commands reject with UnsupportedError", async () => {
    const locker = new Locker(previousRelease);
    for (const opts of [{ shared: true }, { limit: 2 }, { ephemeral: true }]) {
      await assert.rejects(locker.acquire("lock:u", 1000, opts), UnsupportedError);
    }
    const hold = await locker.acquire("lock:u", 1000);
    await assert.rejects(hold.call("SET", "k", "v"), UnsupportedError);
    await assert.rejects(locker.fenced("gate", 1n, "SET", "k", "v"), UnsupportedError);
    assert.equal(await locker.supports("LOCK.CALL"), false);
    await locker.quit();
  });
});

// The versions of ioredis and node-redis that package.json accepts are the ones these tests run
// with, and the types and the manual say the same.
test("the client library versions claimed are the ones tested", () => {
  const fs = require("node:fs");
  const path = require("node:path");
  const root = path.join(__dirname, "..");
  const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
  const installed = (name) => JSON.parse(fs.readFileSync(require.resolve(`${name}/package.json`, { paths: [root] }), "utf8")).version;
  for (const [name, label] of [["ioredis", "ioredis"], ["redis", "node-redis"]]) {
    const range = pkg.peerDependencies[name];
    const m = range.match(/^\^(\d+)\.(\d+)\.(\d+)$/);
    assert.ok(m, `${name}: a caret range, not ${range}`);
    const v = installed(name).split(".").map(Number);
    const floor = m.slice(1).map(Number);
    assert.equal(v[0], floor[0], `${name} ${installed(name)} is tested, ${range} claimed`);
    assert.ok(v[1] > floor[1] || (v[1] === floor[1] && v[2] >= floor[2]), `${name} ${installed(name)} is below ${range}`);
    assert.equal(pkg.devDependencies[name], installed(name));
    const major = `${label} ${floor[0]}`;
    for (const file of [path.join(root, "index.d.ts"), path.join(root, "README.md"), path.join(root, "../../docs/clients.md")]) {
      const text = fs.readFileSync(file, "utf8");
      assert.ok(text.includes(major), `${path.basename(file)} does not say ${major}`);
      assert.doesNotMatch(text, new RegExp(`${label} \\(?v?(?!${floor[0]}\\b)\\d`), `${path.basename(file)} names another ${label} version`);
    }
  }
});

// Locks on several keys at once (locker.acquire([names]), tryAcquire, using), with ioredis and
// node-redis, on a real server, a master with a replica, through the fault proxy, and on a Redis
// Cluster: every key or none, a fence per key, waits in order on every key, every key renewed,
// the loss of one key signalled as the loss of the set, release of every key, `replicas`, a
// partition signalled by the set's lease clock, one slot (CrossSlotError otherwise).
//
// Every test needs LOCK.ACQUIREALL in the server's module and is skipped without it.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");

const { Locker, MultiHold, LockBusyError, LockLostError, NotReplicatedError, CrossSlotError } = require("..");
const { Server, Cluster, LIBRARIES, command, pipeline, eventually } = require("./servers");
const { Proxy } = require("./proxy");

const LEASE = 1200;
const SKIP = "needs LOCK.ACQUIREALL, which this server's module does not have";

let server;
let supported;
before(async () => {
  server = await Server.start();
  supported = await command(server.port, "LOCK.ACQUIREALL").then(
    () => true,
    (e) => !/unknown command/i.test(e.message),
  );
});
after(async () => {
  if (server) await server.stop();
});

/** LOCK.INFO of `name` as an object, or null. */
async function info(port, name) {
  const reply = await command(port, "LOCK.INFO", name);
  if (reply === null) return null;
  const out = {};
  for (let i = 0; i < reply.length; i += 2) out[reply[i]] = reply[i + 1];
  return out;
}

/** How many connections wait in the server in the command `name`. */
async function blocked(name) {
  const list = String(await command(server.port, "CLIENT", "LIST"));
  return list.split("\n").filter((l) => l.includes(` cmd=${name} `) && / flags=\S*b/.test(l)).length;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms)); // elapsed time itself is what is tested

/** Resolves when `signal` aborts; rejects if it has not within `ms`. */
function aborted(signal, ms, what) {
  let timer;
  return Promise.race([
    new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} was not signalled within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

for (const lib of LIBRARIES) {
  describe(`${lib.name}: several keys`, () => {
    let client;
    let locker;
    let other; // another locker, on another client
    let otherClient;
    before(async () => {
      client = await lib.connect(server.port);
      locker = new Locker(client);
      otherClient = await lib.connect(server.port);
      other = new Locker(otherClient);
    });
    after(async () => {
      await locker.quit();
      await other.quit();
      await lib.close(client);
      await lib.close(otherClient);
    });
    const names = (k) => ["a", "b", "c"].map((n) => `{${lib.name}:${k}}:${n}`);

    test("every key or none, a fence per key, release of every key", async (t) => {
      if (!supported) return t.skip(SKIP);
      const keys = names("all");
      const single = await other.acquire(keys[1], 10000);
      assert.equal(await locker.tryAcquire(keys, 10000), null);
      await assert.rejects(locker.acquire(keys, 10000), LockBusyError);
      assert.equal(await info(server.port, keys[0]), null); // nothing taken in part
      assert.equal(await info(server.port, keys[2]), null);
      await single.release();
      const hold = await locker.acquire(keys, 10000);
      assert.ok(hold instanceof MultiHold);
      assert.deepEqual(hold.resources, keys);
      assert.equal(hold.fences.length, 3);
      for (const [i, key] of keys.entries()) {
        const found = await info(server.port, key);
        assert.equal(found.token, hold.token);
        assert.equal(BigInt(found.fence), hold.fences[i]);
        assert.equal(hold.fenceOf(key), hold.fences[i]);
      }
      assert.equal(await hold.owned(), true);
      assert.equal(await hold.release(), true);
      for (const key of keys) assert.equal(await info(server.port, key), null);
      assert.equal(await hold.release(), false);
    });

    test("a wait is served in order on every key: a later request does not overtake it", async (t) => {
      if (!supported) return t.skip(SKIP);
      const keys = names("fifo");
      const first = await other.acquire(keys[0], 10000);
      const order = [];
      const b = locker.acquire(keys.slice(0, 2), 10000, { wait: 5000 }).then(async (h) => {
        order.push("B");
        await h.release();
      });
      await eventually(async () => ((await info(server.port, keys[0])) || {}).waiters === 1, 5000, "B queued");
      assert.equal(await info(server.port, keys[1]), null); // B holds nothing while it waits
      const c = other.acquire(keys[1], 10000, { wait: 5000 }).then(async (h) => {
        order.push("C");
        await h.release();
      });
      // C waits in the server (LOCK.INFO shows no holder of keys[1]): keys[1] is free, but C is behind B.
      await eventually(async () => (await blocked("lock.acquire")) === 1, 5000, "C queued");
      assert.deepEqual(order, []);
      assert.equal(await info(server.port, keys[1]), null);
      await first.release();
      await Promise.all([b, c]);
      assert.deepEqual(order, ["B", "C"]);
    });

    test("a try is not granted behind a queued waiter; a short wait queues behind it", async (t) => {
      if (!supported) return t.skip(SKIP);
      const keys = names("try");
      const first = await other.acquire(keys[1], 10000);
      let got = null;
      const waiter = locker.acquire(keys.slice(0, 2), 10000, { wait: 10000 }).then((h) => (got = h));
      await eventually(async () => ((await info(server.port, keys[1])) || {}).waiters === 1, 5000, "the waiter queued");
      assert.equal(await info(server.port, keys[0]), null); // keys[0] is free, but the waiter for [keys[0], keys[1]] is first
      assert.equal(await other.tryAcquire(keys[0], 10000), null);
      await assert.rejects(other.acquire(keys[0], 10000), LockBusyError);
      assert.equal(await info(server.port, keys[0]), null); // the tries took nothing
      // A shared lock: a reader's try is refused while a writer waits, though readers hold it.
      const reader = await other.acquire(keys[2], 10000, { shared: true });
      const writer = locker.acquire(keys[2], 10000, { wait: 10000 });
      await eventually(async () => ((await info(server.port, keys[2])) || {}).waiters === 1, 5000, "the writer queued");
      assert.equal(await other.tryAcquire(keys[2], 10000, { shared: true }), null);
      await reader.release();
      await (await writer).release();
      // A short wait joins the queue behind the waiter and is served once it is done.
      let behind = null;
      const queued = other.acquire(keys[0], 10000, { wait: 10000 }).then((h) => (behind = h));
      await eventually(async () => (await blocked("lock.acquire")) === 1, 5000, "the short wait queued");
      await first.release();
      await waiter;
      assert.ok(got && behind === null);
      await got.release();
      await queued;
      assert.ok(behind.fence > got.fences[0]);
      await behind.release();
    });

    test("using() renews every key; the loss of one key aborts the signal", async (t) => {
      if (!supported) return t.skip(SKIP);
      const keys = names("renew");
      await locker.using(keys, 600, async (signal, hold) => {
        await sleep(1300); // more than two leases: held only if every key was renewed
        assert.equal(signal.aborted, false);
        for (const key of keys) assert.equal((await info(server.port, key)).token, hold.token);
      });
      for (const key of keys) assert.equal(await info(server.port, key), null);
      let told = null;
      const hold = await locker.acquire(keys, 2400, { onLost: (err, h) => (told = [err, h]) });
      hold.renewEvery(2400);
      await lib.call(otherClient, "DEL", keys[1]); // one key taken away behind the holder's back
      await aborted(hold.signal, 3000, "the loss of one key");
      // Told by a renewal that found the key gone, not by the set's lease clock.
      assert.ok(hold.signal.reason instanceof LockLostError);
      assert.match(hold.signal.reason.message, /no longer held/);
      assert.equal(told[1], hold);
      assert.equal(await hold.release(), false); // the keys still held are released all the same
      for (const key of keys) assert.equal(await info(server.port, key), null);
    });

    test("names are checked: 1 to 64, distinct", async () => {
      await assert.rejects(locker.acquire([], 1000), RangeError);
      await assert.rejects(locker.acquire(["x", "x"], 1000), RangeError);
      await assert.rejects(locker.acquire(["x", 3], 1000), TypeError);
      await assert.rejects(locker.acquire(["x"], 1000, { limit: 2 }), RangeError);
    });
  });
}

describe("several keys with a replica", () => {
  let master;
  let replica;
  before(async () => {
    master = await Server.start(["--repl-diskless-sync-delay", "0"]);
    replica = await Server.start(["--replicaof", "127.0.0.1", String(master.port)]);
    await eventually(async () => {
      const [, acks] = await pipeline(master.port, ["SET", "probe", "1"], ["WAIT", "1", "1000"]);
      return acks === 1;
    }, 20000, "the replica acknowledging");
  });
  after(async () => {
    for (const s of [replica, master]) if (s) await s.stop();
  });

  for (const lib of LIBRARIES) {
    test(`${lib.name}: a grant not acknowledged is released on every key`, async (t) => {
      if (!supported) return t.skip(SKIP);
      const client = await lib.connect(master.port);
      const locker = new Locker(client);
      const keys = [`{${lib.name}:d}:a`, `{${lib.name}:d}:b`];
      try {
        await replica.stopped(async () => {
          const err = await locker.acquire(keys, 5000, { replicas: 1, replicasTimeoutMs: 250 }).catch((e) => e);
          assert.ok(err instanceof NotReplicatedError, String(err));
          assert.equal(err.released, true);
          for (const key of keys) assert.equal(await info(master.port, key), null);
        });
        const hold = await locker.acquire(keys, 5000, { replicas: 1, replicasTimeoutMs: 1000 });
        for (const key of keys) assert.notEqual(await command(replica.port, "LOCK.INFO", key), null); // on the replica at once
        await hold.release();
      } finally {
        await locker.quit();
        await lib.close(client);
      }
    });
  }
});

describe("several keys through the fault proxy", () => {
  for (const lib of LIBRARIES) {
    test(`${lib.name}: a partition is signalled by the lease clock before another client is granted`, async (t) => {
      if (!supported) return t.skip(SKIP);
      const proxy = await Proxy.start(server.port);
      const client = await lib.connect(proxy.port);
      client.on("error", () => {}); // the partition's connection errors
      const locker = new Locker(client);
      const direct = await lib.connect(server.port);
      const other = new Locker(direct);
      const keys = [`{${lib.name}:p}:a`, `{${lib.name}:p}:b`];
      const at = {};
      try {
        const result = await locker.using(keys, LEASE, async (signal, hold) => {
          proxy.blackhole();
          at.partition = performance.now();
          const granted = other.acquire(keys, 10000, { wait: 4000 }).then((h) => {
            at.granted = performance.now();
            return h;
          });
          await aborted(signal, LEASE + 1000, "the partition");
          at.aborted = performance.now();
          at.leaseEnd = hold.leaseEnd; // the lease clock's end, on the clock the client uses
          await (await granted).release();
          return "done";
        });
        assert.equal(result, "done");
        assert.ok(at.leaseEnd < at.granted, JSON.stringify(at));
        assert.ok(at.leaseEnd - at.partition < LEASE, JSON.stringify(at));
      } finally {
        proxy.heal();
        await locker.quit();
        await other.quit();
        await lib.close(direct);
        client.disconnect ? client.disconnect() : client.destroy();
        await proxy.close();
      }
    });
  }
});

// `make test` runs these on the first and last server of its matrix (scripts/matrix.sh), as the
// other Cluster tests.
const skipCluster = process.env.REDISLOCK_SKIP_CLUSTER ? "REDISLOCK_SKIP_CLUSTER is set" : false;
describe("several keys on a Cluster", { skip: skipCluster }, () => {
  let cluster;
  before(async () => {
    if (supported) cluster = await Cluster.start({ replicas: false });
  });
  after(async () => {
    if (cluster) await cluster.stop();
  });
  const CLUSTER_LIBRARIES = [
    {
      name: "ioredis",
      async connect(port) {
        const { Cluster: IoCluster } = require("ioredis");
        const c = new IoCluster([{ host: "127.0.0.1", port }]);
        c.on("error", () => {});
        await new Promise((resolve) => c.once("ready", resolve));
        return c;
      },
      close: (c) => c.disconnect(),
    },
    {
      name: "node-redis",
      async connect(port) {
        const { createCluster } = require("redis");
        const c = createCluster({ rootNodes: [{ socket: { host: "127.0.0.1", port } }] });
        c.on("error", () => {});
        await c.connect();
        return c;
      },
      close: (c) => c.destroy(),
    },
  ];
  for (const lib of CLUSTER_LIBRARIES) {
    test(`${lib.name}: one slot is taken on the node that serves it; two slots are a CrossSlotError`, async (t) => {
      if (!supported) return t.skip(SKIP);
      const client = await lib.connect(cluster.masters[0].port);
      const locker = new Locker(client);
      try {
        const keys = [`{${lib.name}:acct}:a`, `{${lib.name}:acct}:b`];
        const hold = await locker.acquire(keys, 10000, { wait: 1000 });
        let node = null;
        for (const m of cluster.masters) if ((await info(m.port, keys[0]).catch(() => null)) !== null) node = m;
        assert.ok(node, "granted on the node serving the slot");
        for (const [i, key] of keys.entries()) assert.equal(BigInt((await info(node.port, key)).fence), hold.fences[i]);
        assert.equal(await hold.release(), true);
        await assert.rejects(locker.acquire(["acct:a", "acct:b"], 10000), CrossSlotError); // nothing sent
        // A client of one node: the server's CROSSSLOT, as the same error.
        const single = await LIBRARIES.find((l) => l.name === lib.name).connect(cluster.masters[0].port);
        const direct = new Locker(single);
        try {
          await assert.rejects(direct.acquire(["acct:a", "acct:b"], 10000), CrossSlotError);
        } finally {
          await direct.quit();
          await LIBRARIES.find((l) => l.name === lib.name).close(single);
        }
      } finally {
        await locker.quit();
        await lib.close(client);
      }
    });
  }
});

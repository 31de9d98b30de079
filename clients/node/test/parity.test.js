// What the Node.js client offers as the Python client does (docs/clients.md, "One API in both
// languages"), with ioredis and node-redis against a real server: `autoRenew` keeps a hold (one key
// or several) past its TTL as Python's lock without timeout is kept; reacquire() resets the lease to
// the acquired TTL; hold.info() and multiHold.info(); locker.locked() of one key or several, a
// plain string counting as held; multiHold.fencesByName; owned() asks the server; an election's
// leaseLeft, and no `lost` method where Python has the `lost` event (Node: `signal`).
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");

const { Locker } = require("..");
const { Server, LIBRARIES } = require("./servers");

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms)); // elapsed time itself is what is tested

for (const lib of LIBRARIES) {
  describe(`${lib.name}: the same API as Python's`, () => {
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
    const key = (k) => `{${lib.name}:parity}:${k}`;

    test("autoRenew keeps a hold of one key or several past its TTL; without it the lease runs out", async () => {
      // Renewed every 500 ms: a busy machine's stall of the event loop must not pass for a loss.
      const TTL = 1500;
      const one = await locker.acquire(key("renew-1"), TTL, { autoRenew: true });
      const set = await locker.acquire([key("renew-a"), key("renew-b")], TTL, { autoRenew: true });
      const plain = await locker.acquire(key("renew-0"), TTL);
      const started = performance.now();
      while (performance.now() - started < 2 * TTL) await sleep(2 * TTL - (performance.now() - started) + 1); // a timer may fire a little early
      assert.equal(one.signal.aborted, false);
      assert.equal(set.signal.aborted, false);
      assert.equal(await one.owned(), true);
      assert.equal(await set.owned(), true);
      assert.equal(plain.signal.aborted, true); // not renewed: its lease clock ran out
      assert.equal(await locker.info(key("renew-0")), null);
      assert.equal(await one.release(), true);
      assert.equal(await set.release(), true);
      await assert.rejects(locker.acquire(key("renew-x"), TTL, { autoRenew: "yes" }), TypeError);
    });

    test("reacquire() resets the lease to the acquired TTL, on one key and on every key of a set", async () => {
      const one = await locker.acquire(key("re-1"), 10000);
      const set = await locker.acquire([key("re-a"), key("re-b")], 10000);
      await one.extend(2000);
      await set.extend(2000);
      assert.ok((await one.info()).ttl <= 2000);
      for (const found of await set.info()) assert.ok(found.ttl <= 2000);
      await one.reacquire();
      await set.reacquire();
      assert.ok((await one.info()).ttl > 5000);
      for (const found of await set.info()) assert.ok(found.ttl > 5000);
      assert.ok(one.leaseLeft > 5000 && set.leaseLeft > 5000);
      await one.release();
      await set.release();
      await assert.rejects(one.reacquire(), /released/);
    });

    test("info() of a hold, fencesByName, and owned() that asks the server", async () => {
      const names = [key("fx-a"), key("fx-b")];
      const set = await locker.acquire(names, 10000);
      const infos = await set.info();
      assert.deepEqual(
        infos.map((i) => [i.token, i.fence]),
        set.fences.map((f) => [set.token, f]),
      );
      assert.deepEqual([...set.fencesByName], names.map((n, i) => [n, set.fences[i]]));
      assert.equal(set.fencesByName.get(names[1]), set.fenceOf(names[1]));
      assert.equal(await set.owned(), true);
      await lib.call(client, "DEL", names[1]); // a key taken away behind the holder's back
      assert.ok(set.leaseLeft > 0); // the lease clock cannot know it: owned() asks the server
      assert.equal(await set.owned(), false);
      await set.release();
    });

    test("locked() of one key or several: held by anyone; a plain string counts as held", async () => {
      const names = [key("lk-a"), key("lk-b")];
      assert.equal(await locker.locked(names[0]), false);
      assert.equal(await locker.locked(names), false);
      const hold = await locker.acquire(names[1], 10000);
      assert.equal(await locker.locked(names[0]), false);
      assert.equal(await locker.locked(names[1]), true);
      assert.equal(await locker.locked(names), true);
      await hold.release();
      assert.equal(await locker.locked(names), false);
      await lib.call(client, "SET", names[0], "redis-py's own lock");
      assert.equal(await locker.locked(names), true);
      await lib.call(client, "DEL", names[0]);
    });

    test("an election's leaseLeft; leadership lost is its signal, not a `lost` method", async () => {
      const election = locker.election(key("el"), { leaseMs: 10000 });
      assert.equal(election.leaseLeft, 0);
      assert.equal(election.lost, undefined);
      await election.campaign();
      assert.ok(election.leaseLeft > 5000 && election.leaseLeft <= 10000);
      assert.equal(election.signal.aborted, false);
      assert.equal(await election.resign(), true);
      assert.equal(election.leaseLeft, 0);
    });
  });
}

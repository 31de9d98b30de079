// Money moved between accounts, each transfer holding both accounts at once (docs/clients.md,
// "Locking several resources").
//
//   node transfer.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
//
// Transfers run both ways at the same time (alice → bob while bob → alice): each takes the locks
// of its two accounts in one step, all or nothing, so no transfer holds one account while waiting
// for the other, and none can deadlock, whatever order it names them in. Each write goes through
// its account's fence gate with that account's fence. The total stays the same.
"use strict";

const assert = require("node:assert/strict");

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const Redis = require("ioredis");
  const { Locker } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  // Moves `amount` from `source` to `target`: false if `source` has too little.
  async function transfer(source, target, amount) {
    const locks = [`{bank}:lock:${source}`, `{bank}:lock:${target}`]; // one hash tag: one slot
    // Both accounts, or wait (up to 5 s) for both; renewed while the routine runs, released after.
    return locker.using(locks, 10000, { wait: 5000 }, async (signal, hold) => {
      const [sourceFence, targetFence] = hold.fences; // one fence per account, in order
      if (Number(await redis.get(`{bank}:balance:${source}`)) < amount) return false;
      if (signal.aborted) throw signal.reason; // lost (its lease clock ran out): stop
      // Each write is fenced with its own account's fence: a holder that stalled past its lease
      // and writes late is refused (StaleFenceError) once the next holder has written.
      await locker.fenced(`{bank}:gate:${source}`, sourceFence, "DECRBY", `{bank}:balance:${source}`, amount);
      await locker.fenced(`{bank}:gate:${target}`, targetFence, "INCRBY", `{bank}:balance:${target}`, amount);
      return true;
    });
  }

  if (!(await locker.supports("LOCK.ACQUIREALL"))) {
    console.log("this server's redislock has no LOCK.ACQUIREALL: nothing to show");
  } else {
    await redis.mset("{bank}:balance:alice", 100, "{bank}:balance:bob", 100);
    const moves = [];
    for (let i = 0; i < 10; i++) moves.push(transfer("alice", "bob", 7), transfer("bob", "alice", 5));
    await Promise.all(moves);
    const [alice, bob] = (await redis.mget("{bank}:balance:alice", "{bank}:balance:bob")).map(Number);
    console.log(`alice ${alice}, bob ${bob}`);
    assert.deepEqual([alice, bob], [80, 120]); // every transfer applied once, none lost
    assert.equal(await transfer("alice", "bob", 1000), false);
    await redis.del("{bank}:balance:alice", "{bank}:balance:bob", "{bank}:gate:alice", "{bank}:gate:bob");
  }
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

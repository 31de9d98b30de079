// One active scheduler among N processes: the classic job of a leader election (docs/clients.md).
//
//   node election.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
//
// Each scheduler campaigns; the one elected schedules jobs, writing each through a fence gate with
// its term, then resigns, and the next candidate in line takes over with a higher term. Here three
// schedulers run in one process and each leads once; in production each is a process of its own,
// and leads until it stops (or dies: its connection closes and the next one leads at once). A
// write with an older term is refused at the gate. Where the server has LOCK.OBSERVE, a follower
// prints each new leader as it is elected.
"use strict";

const assert = require("node:assert/strict");

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const Redis = require("ioredis");
  const { Locker, StaleFenceError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  async function scheduler(name, jobs) {
    const election = locker.election("election:scheduler", { leaseMs: 10000, data: name });
    const term = await election.campaign(); // waits in the server until this one leads
    console.log(`${name} leads in term ${term}`);
    for (let n = 0; n < jobs; n++) {
      if (election.signal.aborted) break; // lost (its lease clock ran out): stop at once
      // Every write goes through the gate with the term: once a newer leader has written,
      // a late write of this one is refused (StaleFenceError) instead of mixing in.
      await locker.fenced("gate:jobs", term, "RPUSH", "jobs:queue", `job ${n} of term ${term} by ${name}`);
    }
    await election.resign(); // the next candidate leads at once
    return term;
  }

  // A follower's view: who leads, as soon as it changes (LOCK.OBSERVE).
  async function follow(signal) {
    for await (const leader of locker.election("election:scheduler").observe({ signal })) {
      if (leader === null) console.log("nobody leads"); // resigned, and no candidate waiting
      else console.log(`now leading: ${leader.data} in term ${leader.term}`);
    }
  }

  const following = new AbortController();
  const followed = (await locker.supports("LOCK.OBSERVE")) ? follow(following.signal).catch(() => {}) : null;

  const terms = await Promise.all([0, 1, 2].map((i) => scheduler(`scheduler-${i}`, 2)));
  const jobs = await redis.lrange("jobs:queue", 0, -1);
  console.log(jobs);
  const written = jobs.map((job) => BigInt(job.split(" ")[4])); // "job N of term T by NAME"
  assert.deepEqual(written, [...written].sort((a, b) => (a < b ? -1 : 1))); // one leader after the other
  assert.deepEqual(new Set(written), new Set(terms));
  const oldest = terms.reduce((a, b) => (a < b ? a : b));
  await locker.fenced("gate:jobs", oldest, "RPUSH", "jobs:queue", "late write").then(
    () => assert.fail("a deposed leader's write went through"),
    (err) => {
      if (!(err instanceof StaleFenceError)) throw err;
      console.log("a deposed leader's write is refused:", err.message);
    },
  );
  assert.equal(await locker.election("election:scheduler").leader(), null); // nobody leads now

  following.abort();
  await followed;
  await redis.del("gate:jobs", "jobs:queue");
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

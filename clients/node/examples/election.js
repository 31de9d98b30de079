// One active scheduler among N processes, with election.run (docs/clients.md).
//
//   node election.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
//
// Each scheduler runs election.run(schedule): it campaigns, and once elected schedule(signal)
// writes jobs through a fence gate with its term until `signal` aborts — the moment leadership is
// lost, or when the scheduler is stopped —; then the term is resigned and the next candidate in
// line leads, with a higher term. Here three schedulers run in one process, queued in order, and
// stopped one after the other (a rolling restart); in production each is a process of its own, and
// one that dies is succeeded at once. A follower watches who leads (LOCK.OBSERVE), and sees nobody
// lead once the last one stopped. A write with an older term is refused at the gate.
"use strict";

const assert = require("node:assert/strict");

const PORT = Number(process.env.REDIS_PORT || 6379);
const NAME = "election:scheduler";

async function main() {
  const Redis = require("ioredis");
  const { Locker, StaleFenceError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  // One of the N processes.
  function scheduler(name) {
    const election = locker.election(NAME, { leaseMs: 10000, data: name });
    let worked;
    const s = { name, election, worked: new Promise((resolve) => (worked = resolve)) };
    // Called once elected; `signal` aborts the moment leadership is lost (or the run is stopped),
    // before the term is resigned. When it returns, the term is resigned.
    async function schedule(signal) {
      const term = election.term;
      for (let n = 0; n < 2; n++) {
        if (signal.aborted) return; // lost: stop at once
        // Every write goes through the gate with the term: once a newer leader has written,
        // a late write of this one is refused (StaleFenceError) instead of mixing in.
        await locker.fenced("gate:jobs", term, "RPUSH", "jobs:queue", `job ${n} of term ${term} by ${name}`);
      }
      worked();
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })); // leads until lost or stopped
    }
    s.run = election.run(schedule, { onElected: (term) => console.log(`${name} leads in term ${term}`) });
    return s;
  }

  // How many candidates wait (LOCK.INFO's waiters).
  const queued = async () => ((await locker.info(NAME)) || { waiters: 0 }).waiters;

  const schedulers = [];
  for (let i = 0; i < 3; i++) {
    schedulers.push(scheduler(`scheduler-${i}`)); // started in order, each queued behind the ones before
    if (i === 0) await schedulers[0].worked; // the first one leads
    else while ((await queued()) < i) await new Promise((r) => setTimeout(r, 10)); // the others wait in the server, in order
  }

  const follower = locker.election(NAME).observe();
  const terms = [];
  for (const s of schedulers) {
    await s.worked;
    const { value: leader } = await follower.next(); // waits in the server for the next leader
    console.log(`a follower sees ${leader.data} leading in term ${leader.term}`);
    terms.push(leader.term);
    s.election.stop(); // shutting down: its term resigned, the next one leads
    await s.run;
  }
  console.log("a follower sees", (await follower.next()).value); // null: nobody leads after the last one stopped
  await follower.return();

  for (const job of await redis.lrange("jobs:queue", 0, -1)) console.log(job);
  await locker.fenced("gate:jobs", terms[0], "RPUSH", "jobs:queue", "late write").then(
    () => assert.fail("a deposed leader's write went through"),
    (err) => {
      if (!(err instanceof StaleFenceError)) throw err;
      console.log("a deposed leader's write is refused:", err.message);
    },
  );
  await redis.del("gate:jobs", "jobs:queue");
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

// A leader that changes what it publishes without a new term (docs/clients.md).
//
//   node proclaim.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
//
// The leader publishes its address as the election's data, then proclaims a new one (it moved to
// another port): the term stays the same, and a follower sees each value in turn. Once it has
// resigned, it can no longer proclaim.
"use strict";

const assert = require("node:assert/strict");

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const Redis = require("ioredis");
  const { Locker, LockLostError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  const leader = locker.election("election:api", { leaseMs: 10000, data: "10.0.0.5:8080" });
  const term = await leader.campaign();

  // A follower: each leader, and each value a leader proclaims.
  const seen = [];
  const following = new AbortController();
  const follower = locker.election("election:api").observe({ signal: following.signal });
  for await (const now of follower) {
    if (now === null) continue;
    console.log(`term ${now.term}: ${now.data}`);
    seen.push([now.term, String(now.data)]);
    if (seen.length === 1) await leader.proclaim("10.0.0.5:8081"); // the same term, a new value
    if (seen.length === 2) break;
  }
  assert.deepEqual(seen, [[term, "10.0.0.5:8080"], [term, "10.0.0.5:8081"]]);
  assert.equal(leader.term, term);
  await leader.resign();
  await leader.proclaim("10.0.0.5:8082").then(
    () => assert.fail("proclaimed without leading"),
    (err) => {
      if (!(err instanceof LockLostError)) throw err;
      console.log("no longer leading:", err.message);
    },
  );
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

// A grant reported only once a replica has it: the example of docs/clients.md. With a replica
// attached to the server, the routine runs; without one (as where the tests run it), using()
// rejects with NotReplicatedError and nothing is left held.
//
//   node durable.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"use strict";

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const Redis = require("ioredis");
  const { Locker, NotReplicatedError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);
  try {
    await locker.using("lock:ledger", 30000, { replicas: 1, replicasTimeoutMs: 500 }, async (signal, hold) => {
      // LOCK.ACQUIRE was followed by WAIT 1 500 on its connection: a replica has the grant.
      console.log("holding lock:ledger with fence", hold.fence);
    });
  } catch (err) {
    if (!(err instanceof NotReplicatedError)) throw err;
    // Not acknowledged within 500 ms: the grant was released again (err.released).
    console.log(`not replicated: ${err.replicas} of ${err.needed} replica(s); released: ${err.released}`);
  }
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

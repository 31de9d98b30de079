// Shared locks and semaphores from Node.js: the example of docs/clients.md.
//
//   node kinds.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"use strict";

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const Redis = require("ioredis");
  const { Locker, LockKindError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  // Readers share lock:config; each has its own token, fence and lease.
  const readers = [
    await locker.acquire("lock:config", 30000, { shared: true }),
    await locker.acquire("lock:config", 30000, { shared: true }),
  ];
  const info = await locker.info("lock:config");
  console.log(info.mode, info.holders.map((h) => h.fence)); // shared [ 61727…n, 61727…n ]

  // A writer waits in the server until every reader has left; readers that come after it
  // wait for it.
  const writing = locker.acquire("lock:config", 30000, { wait: 5000 });
  for (const reader of readers) await reader.release();
  const writer = await writing;
  console.log("writing with fence", writer.fence);
  await writer.release();

  // A semaphore: at most two holders of lock:exports at once.
  await locker.using("lock:exports", 30000, { limit: 2 }, async (signal, hold) => {
    console.log("export slot with fence", hold.fence);
    await locker.acquire("lock:exports", 30000, { limit: 3 }).catch((err) => {
      if (!(err instanceof LockKindError)) throw err; // every holder must give the same limit
      console.log("refused: the key has LIMIT", err.limit);
    });
  });

  await locker.quit();
  await redis.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

// redislock from Node.js: the example of docs/clients.md.
//
//   node quickstart.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"use strict";

const PORT = Number(process.env.REDIS_PORT || 6379);

async function writeReport(part, fence) {
  console.log(`${part} written with fence ${fence}`);
}

async function main() {
  const Redis = require("ioredis");
  const { Locker, LockBusyError } = require("redislock");

  const redis = new Redis({ host: "127.0.0.1", port: PORT });
  const locker = new Locker(redis);

  // As in npm redlock, for one name: acquire → a hold with a fence (a bigint), extend, release.
  const hold = await locker.acquire("lock:report", 30000, { wait: 5000 });
  try {
    await writeReport("part 1", hold.fence);
    await hold.extend(30000);
    await writeReport("part 2", hold.fence);
  } finally {
    await hold.release();
  }

  // using(): renewed every third of the TTL; `signal` aborts the moment the lock is lost.
  await locker.using("lock:nightly", 10000, async (signal, hold) => {
    for (const part of ["a", "b", "c"]) {
      if (signal.aborted) throw signal.reason;
      await writeReport(part, hold.fence);
    }
  });

  // Without `wait`, a busy lock rejects at once with LockBusyError.
  const first = await locker.acquire("lock:report", 30000);
  await locker.acquire("lock:report", 30000).catch((err) => {
    if (!(err instanceof LockBusyError)) throw err;
  });
  await first.release();
  await locker.quit();
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

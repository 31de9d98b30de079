// redislock with node-redis 6 (the `redis` package).
//
//   node node_redis.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"use strict";

const PORT = Number(process.env.REDIS_PORT || 6379);

async function main() {
  const { createClient } = require("redis");
  const { Locker } = require("redislock");

  const client = await createClient({ socket: { host: "127.0.0.1", port: PORT } }).connect();
  const locker = new Locker(client);

  const hold = await locker.acquire("lock:report", 30000, { wait: 5000 });
  console.log("fence", hold.fence);               // e.g. 61727287109632n
  await hold.release();

  await locker.quit();
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

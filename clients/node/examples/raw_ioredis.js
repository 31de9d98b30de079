// redislock with plain ioredis commands (docs/clients.md).
//
//   node raw_ioredis.js        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"use strict";

const Redis = require("ioredis");

// The resource: it accepts a write only with a fence at least the newest it has seen.
let newest = 0n;
async function writeReport(part, fence) {
  if (fence < newest) throw new Error("a newer holder has written: stop");
  newest = fence;
  console.log(`wrote ${part}`);
}

async function main() {
  // stringNumbers: integer replies arrive as strings, so fences above 2^53 stay exact.
  const redis = new Redis({
    host: "127.0.0.1",
    port: Number(process.env.REDIS_PORT || 6379),
    stringNumbers: true,
  });

  // "*": the server makes a random token. BLOCK: wait in the server, up to 10 s (without it,
  // a busy lock answers null at once).
  const grant = await redis.call("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000, "BLOCK", 10000);
  if (grant === null) throw new Error("lock:report is held by someone else");
  const [token, fenceStr] = grant;
  const fence = BigInt(fenceStr);

  await writeReport("part 1", fence);
  if ((await redis.call("LOCK.EXTEND", "lock:report", token, "PX", 30000)) !== "1") {
    throw new Error("lease lost: stop working");
  }
  await writeReport("part 2", fence);
  console.log("released:", await redis.call("LOCK.RELEASE", "lock:report", token)); // "0" if it had expired
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

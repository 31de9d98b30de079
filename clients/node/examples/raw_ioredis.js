// redislock with plain ioredis commands (docs/clients.md).
//
//   node raw_ioredis.js PORT
//
// Acquires, writes twice with the fence, extends, releases, then waits with BLOCK; exits 0.
"use strict";

const assert = require("node:assert/strict");
const PORT = Number(process.argv[2]);
const fences = [];
async function writeReport(fence) {
  assert.ok(fences.every((f) => f <= fence));
  fences.push(fence);
}

async function main() {
  // docs:begin raw
  const Redis = require("ioredis");
  // stringNumbers: integer replies arrive as strings, so fences above 2^53 stay exact.
  const redis = new Redis({ host: "127.0.0.1", port: PORT, stringNumbers: true });

  const grant = await redis.call("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000);
  if (grant === null) throw new Error("busy");
  const [token, fenceStr] = grant;
  const fence = BigInt(fenceStr);

  await writeReport(fence);                        // the resource checks the fence
  if ((await redis.call("LOCK.EXTEND", "lock:report", token, "PX", 30000)) !== "1") {
    throw new Error("lease lost");
  }
  await writeReport(fence);
  await redis.call("LOCK.RELEASE", "lock:report", token);   // "1" or "0"

  // Wait up to 10 s in the server:
  const waited = await redis.call("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000, "BLOCK", 10000);
  // docs:end raw

  assert.ok(waited !== null && BigInt(waited[1]) > fence);
  assert.equal(await redis.call("LOCK.RELEASE", "lock:report", waited[0]), "1");
  await redis.quit();
  console.log("OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

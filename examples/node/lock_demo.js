#!/usr/bin/env node
// redislock from Node.js with ioredis.
//
//     npm install            # in this directory: ioredis
//     node lock_demo.js     # 127.0.0.1:6379, or REDIS_PORT=6380; REDIS_HOST=host
//
// Against a server with the redislock module loaded, it shows:
//   1. acquire a lock with a generated token (`*`), write to a resource guarded by the fencing
//      token, extend the lease, write again, release;
//   2. a holder that pauses past its lease: the next holder gets a larger fence, and the
//      resource rejects the late write of the old holder;
//   3. BLOCK: a second client waits in the server and is granted the lock when the first
//      releases.
// It prints a transcript and exits 0, or exits 1 on any unexpected reply. It uses the keys
// demo:report and demo:queue, with TTLs of at most 10 s.
"use strict";

let Redis;
try {
  Redis = require("ioredis");
} catch (e) {
  console.error("lock_demo.js needs ioredis: run `npm install` in examples/node");
  process.exit(1);
}

const HOST = process.env.REDIS_HOST || "127.0.0.1";
const PORT = Number(process.env.REDIS_PORT || 6379);

class Unexpected extends Error {}

// Stands for the storage the lock protects (a database row, a file, an API). It remembers the
// highest fence it has seen and refuses writes that carry a lower one, so a holder whose lease
// ran out cannot overwrite the work of the holder after it. Fences are BigInts: they exceed
// 2^53, where JavaScript numbers lose precision.
class FencedResource {
  constructor() {
    this.highest = 0n;
    this.data = [];
  }

  write(fence, item) {
    if (fence < this.highest) {
      console.log(`resource: write with fence ${fence} rejected (highest seen ${this.highest})`);
      return false;
    }
    this.highest = fence;
    this.data.push(item);
    console.log(`resource: write with fence ${fence} accepted (${item})`);
    return true;
  }
}

const connections = [];

function connect() {
  // stringNumbers: integer replies arrive as strings, so fences stay exact.
  // retryStrategy: give up at once when the server is not there, instead of retrying forever.
  const redis = new Redis({
    host: HOST,
    port: PORT,
    stringNumbers: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 1,
  });
  redis.on("error", (e) => {
    redis.lastError = e;
  });
  connections.push(redis);
  return redis;
}

// LOCK.ACQUIRE: {token, fence} when granted, null when the lock is busy.
async function acquire(redis, key, token, px, ...extra) {
  const reply = await redis.call("LOCK.ACQUIRE", key, token, "PX", px, ...extra);
  if (reply === null) return null;
  if (!Array.isArray(reply) || reply.length !== 2 || !/^[0-9]+$/.test(reply[1])) {
    throw new Unexpected(`LOCK.ACQUIRE answered ${JSON.stringify(reply)}`);
  }
  return { token: reply[0], fence: BigInt(reply[1]) };
}

function expect(what, got, want) {
  if (got !== want) {
    throw new Unexpected(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  }
}

// LOCK.INFO as an object (a flat field/value array under RESP2, which ioredis speaks).
async function lockInfo(redis, key) {
  const reply = await redis.call("LOCK.INFO", key);
  if (reply === null) return null;
  const info = {};
  for (let i = 0; i + 1 < reply.length; i += 2) info[reply[i]] = reply[i + 1];
  return info;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function basic(redis) {
  const resource = new FencedResource();
  const grant = await acquire(redis, "demo:report", "*", 10000);
  if (grant === null) throw new Unexpected("demo:report is held by someone else (try again in 10 s)");
  const { token, fence } = grant;
  console.log(`acquired: token=${token} fence=${fence}`);

  if (!resource.write(fence, "part 1")) throw new Unexpected("the resource refused the holder's write");
  expect("LOCK.EXTEND", await redis.call("LOCK.EXTEND", "demo:report", token, "PX", 10000), "1");
  console.log(`extended: 1 (ttl ${(await lockInfo(redis, "demo:report")).ttl} ms)`);
  if (!resource.write(fence, "part 2")) throw new Unexpected("the resource refused the holder's write");
  expect("LOCK.RELEASE", await redis.call("LOCK.RELEASE", "demo:report", token), "1");
  console.log("released: 1");
  console.log(`resource holds: ${resource.data.join(", ")}`);
}

async function leaseLost(redis) {
  const resource = new FencedResource();
  const a = await acquire(redis, "demo:report", "*", 100);
  if (a === null) throw new Unexpected("demo:report is held by someone else");
  console.log(`holder A acquired: fence=${a.fence} (lease 100 ms)`);
  console.log("holder A pauses for 300 ms (GC, swap, network...): its lease expires");
  await sleep(300);

  const b = await acquire(redis, "demo:report", "*", 10000);
  if (b === null) throw new Unexpected("the expired lock was not granted to B");
  console.log(`holder B acquired: fence=${b.fence}`);
  if (b.fence <= a.fence) throw new Unexpected(`fence ${b.fence} of B is not greater than fence ${a.fence} of A`);
  if (!resource.write(b.fence, "B's report")) throw new Unexpected("the resource refused B's write");

  // A wakes up and carries on: the resource turns it away, and its lease is gone.
  if (resource.write(a.fence, "A's late report")) throw new Unexpected("the resource accepted a stale fence");
  expect("LOCK.EXTEND by A", await redis.call("LOCK.EXTEND", "demo:report", a.token, "PX", 10000), "0");
  console.log("stale holder extend: 0 (lease lost)");
  expect("LOCK.RELEASE by B", await redis.call("LOCK.RELEASE", "demo:report", b.token), "1");
  console.log("released: 1");
}

async function block(redis) {
  const holder = await acquire(redis, "demo:queue", "*", 10000);
  if (holder === null) throw new Unexpected("demo:queue is held by someone else");
  console.log(`holder acquired: fence=${holder.fence}`);

  // The waiter needs its own connection: it blocks until the lock is granted.
  const waiter = connect();
  const start = Date.now();
  const waiting = acquire(waiter, "demo:queue", "*", 10000, "BLOCK", 5000).then((grant) => ({
    grant,
    ms: Date.now() - start,
  }));
  waiting.catch(() => {}); // awaited below; keeps an early failure from being "unhandled"

  const deadline = Date.now() + 5000;
  while (((await lockInfo(redis, "demo:queue")) || {}).waiters !== "1") {
    if (Date.now() > deadline) throw new Unexpected("the waiter never showed in LOCK.INFO");
    await sleep(10);
  }
  console.log("waiter queued: waiters=1 (LOCK.ACQUIRE demo:queue * PX 10000 BLOCK 5000)");

  await sleep(200); // the holder works a little longer
  expect("LOCK.RELEASE", await redis.call("LOCK.RELEASE", "demo:queue", holder.token), "1");
  console.log("holder released: 1");
  const { grant, ms } = await waiting;
  if (grant === null) throw new Unexpected("the waiter was not granted the lock");
  console.log(`waiter granted: token=${grant.token} fence=${grant.fence} after ${ms} ms`);
  if (grant.fence <= holder.fence) throw new Unexpected("the waiter's fence is not greater than the holder's");
  expect("LOCK.RELEASE", await redis.call("LOCK.RELEASE", "demo:queue", grant.token), "1");
  console.log("released: 1");
}

async function main() {
  const version = require("ioredis/package.json").version;
  console.log(`redislock demo (ioredis ${version}) on ${HOST}:${PORT}`);
  const redis = connect();
  console.log("-- acquire, fenced writes, extend, release");
  await basic(redis);
  console.log("-- a holder that lost its lease");
  await leaseLost(redis);
  console.log("-- BLOCK: wait for the lock in the server");
  await block(redis);
  console.log("demo OK");
}

main()
  .catch((e) => {
    const cause = connections.map((c) => c.lastError).find(Boolean);
    console.error(`demo FAILED: ${e.message}${cause && cause !== e ? ` (${cause.message})` : ""}`);
    process.exitCode = 1;
  })
  .finally(() => {
    for (const c of connections) c.disconnect();
  });

// For bound.test.js: takes and ends every kind of hold bound to a connection (released, resigned,
// lost to a CLIENT KILL), quits, and must then exit by itself: nothing of the holds keeps the
// process alive.
//
//   node bound-child.js ioredis|node-redis PORT NAME
"use strict";

const { Locker } = require("..");
const { LIBRARIES } = require("./servers");

async function main() {
  const [libName, port, name] = process.argv.slice(2);
  const lib = LIBRARIES.find((l) => l.name === libName);
  const client = await lib.connect(Number(port));
  const locker = new Locker(client);
  await (await locker.acquire(name, 10000, { ephemeral: true })).release();
  await locker.using([`{${name}}:a`, `{${name}}:b`], 10000, { ephemeral: true }, async () => {});
  const election = locker.election(name, { leaseMs: 10000 });
  await election.campaign();
  await election.resign();
  const lost = await locker.acquire(name, 10000, { ephemeral: true });
  lost.renewEvery(10000);
  await lib.call(client, "CLIENT", "KILL", "ID", String((await locker.info(name)).client));
  if (!lost.signal.aborted) await new Promise((resolve) => lost.signal.addEventListener("abort", resolve, { once: true }));
  await locker.quit();
  await lib.close(client);
  process.stdout.write("done\n");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

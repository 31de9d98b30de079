// A leader for election.test.js to kill: campaigns for the election given, prints the term, and
// leads until killed.
//
//   node election-child.js ioredis|node-redis PORT NAME
"use strict";

const { Locker } = require("..");
const { LIBRARIES } = require("./servers");

async function main() {
  const [libName, port, name] = process.argv.slice(2);
  const lib = LIBRARIES.find((l) => l.name === libName);
  const client = await lib.connect(Number(port));
  const election = new Locker(client).election(name, { data: "child" });
  process.stdout.write(`${await election.campaign()}\n`);
  setInterval(() => {}, 1 << 30); // leads until killed
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

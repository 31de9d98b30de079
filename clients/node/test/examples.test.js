// The example programs that the manual quotes (clients/node/examples) run against a real
// server and exit 0, leaving no key behind. `require("redislock")` resolves to this package.
"use strict";

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { execFile } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const { Server, LIBRARIES } = require("./servers");

const DIR = path.join(__dirname, "..", "examples");
let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

// NODE_PATH makes `require("redislock")` find this package (its parent directory is named
// `node`, so a link named redislock is made in a temporary directory).
function nodePath() {
  const dir = fs.mkdtempSync(path.join(require("node:os").tmpdir(), "redislock-examples-"));
  fs.symlinkSync(path.resolve(__dirname, ".."), path.join(dir, "redislock"));
  return [dir, path.resolve(__dirname, "..", "node_modules")].join(path.delimiter);
}

for (const file of fs.readdirSync(DIR).filter((f) => f.endsWith(".js")).sort()) {
  test(`examples/${file}`, async () => {
    const control = await LIBRARIES[0].connect(server.port);
    await control.flushall();
    await control.quit();
    const env = { ...process.env, NODE_PATH: nodePath(), REDIS_PORT: String(server.port) };
    const { code, stdout, stderr } = await new Promise((resolve) => {
      execFile(process.execPath, [path.join(DIR, file)], { env, timeout: 60000 },
        (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
    });
    assert.equal(code, 0, `${file} failed:\n${stdout}\n${stderr}`);
    const client = await LIBRARIES[0].connect(server.port);
    try {
      assert.equal(Number(await client.dbsize()), 0, `${file} left keys behind`);
    } finally {
      await client.quit();
    }
  });
}

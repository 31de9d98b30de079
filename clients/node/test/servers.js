// Throw-away redis-server processes for the tests: loopback, a free port, a temporary
// directory, the module loaded; stopped when the test file ends (and on failure).
// REDIS_SERVER selects the binary (valkey-server works too), REDISLOCK_MODULE the module.
"use strict";

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const REPO = path.resolve(__dirname, "../../..");

function modulePath() {
  const p = path.resolve(process.env.REDISLOCK_MODULE || path.join(REPO, "target/release/libredislock.so"));
  if (!fs.existsSync(p)) throw new Error(`no module at ${p}: run cargo build --release (make test does)`);
  return p;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    sock.setTimeout(500);
    sock.once("connect", () => sock.write("PING\r\n"));
    sock.once("data", (d) => {
      sock.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    sock.once("error", () => resolve(false));
    sock.once("timeout", () => {
      sock.destroy();
      resolve(false);
    });
  });
}

class Server {
  static async start() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redislock-node-"));
    for (let attempt = 0; attempt < 5; attempt++) {
      const port = await freePort();
      const proc = spawn(
        process.env.REDIS_SERVER || "redis-server",
        ["--bind", "127.0.0.1", "--port", String(port), "--dir", dir, "--save", "", "--appendonly", "no",
          "--logfile", "server.log", "--loadmodule", modulePath()],
        { cwd: dir, stdio: "ignore" },
      );
      let exited = false;
      proc.once("exit", () => (exited = true));
      const deadline = Date.now() + 10000;
      while (!exited && Date.now() < deadline) {
        if (await ping(port)) return new Server(proc, port, dir);
        await new Promise((r) => setTimeout(r, 10)); // polling for the process to listen
      }
      proc.kill("SIGKILL");
    }
    throw new Error(`redis-server did not start (log in ${dir})`);
  }

  constructor(proc, port, dir) {
    this.proc = proc;
    this.port = port;
    this.dir = dir;
  }

  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGKILL");
      await exited;
    }
    if (!process.env.REDISLOCK_KEEP_TEST_DIRS) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The two client libraries, each as { name, connect(port) → client, close(client), call(client, …args) }. */
const LIBRARIES = [
  {
    name: "ioredis",
    async connect(port) {
      const Redis = require("ioredis");
      const c = new Redis({ host: "127.0.0.1", port });
      await c.ping();
      return c;
    },
    async close(c) {
      await c.quit();
    },
    call(c, ...args) {
      return c.call(...args);
    },
  },
  {
    name: "node-redis",
    async connect(port) {
      const { createClient } = require("redis");
      const c = createClient({ socket: { host: "127.0.0.1", port } });
      c.on("error", () => {});
      await c.connect();
      return c;
    },
    async close(c) {
      await (c.close ? c.close() : c.quit());
    },
    call(c, ...args) {
      return c.sendCommand(args.map(String));
    },
  },
];

module.exports = { Server, LIBRARIES, REPO, modulePath };

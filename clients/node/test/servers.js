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

function bind(port) {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(port, "127.0.0.1", () => {
      const bound = srv.address().port;
      srv.close(() => resolve(bound));
    });
  });
}

/** A free loopback port; with `bus`, one whose Cluster bus port (port + 10000) is free too. */
async function freePort(bus = false) {
  for (;;) {
    const port = await bind(0);
    if (!bus) return port;
    if (port + 10000 > 65535) continue;
    if (await bind(port + 10000).then(() => true, () => false)) return port;
  }
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
  /** `extra`: more arguments for the server (a Cluster node's, for one); `at`: its port (a server that comes back where it was). */
  static async start(extra = [], at = null) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redislock-node-"));
    const cluster = extra.includes("--cluster-enabled");
    for (let attempt = 0; attempt < 5; attempt++) {
      const port = at || (await freePort(cluster));
      const proc = spawn(
        process.env.REDIS_SERVER || "redis-server",
        ["--bind", "127.0.0.1", "--port", String(port), "--dir", dir, "--save", "", "--appendonly", "no",
          "--logfile", "server.log", "--loadmodule", modulePath(), ...extra],
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

  /**
   * Runs `work()` with the process stopped (SIGSTOP, seen stopped in /proc), then continues it:
   * meanwhile it reads, answers and acknowledges nothing, as in DEBUG SLEEP, but from a moment
   * the test knows.
   */
  async stopped(work) {
    const state = () => fs.readFileSync(`/proc/${this.proc.pid}/stat`, "utf8").replace(/^.*\) /s, "")[0];
    this.proc.kill("SIGSTOP");
    await eventually(async () => state() === "T", 5000, "the process stopped");
    try {
      return await work();
    } finally {
      this.proc.kill("SIGCONT");
      await eventually(async () => state() !== "T", 5000, "the process continued");
    }
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

/**
 * Commands sent one after the other on a connection of their own, with no client library in
 * between: their RESP2 replies (errors as Error values), for setting up and looking at servers.
 */
function pipeline(port, ...commands) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, "127.0.0.1");
    const wire = commands
      .map((args) => `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join(""))
      .join("");
    sock.once("connect", () => sock.write(wire));
    let data = Buffer.alloc(0);
    sock.on("data", (d) => {
      data = Buffer.concat([data, d]);
      const replies = [];
      for (let at = 0; replies.length < commands.length; ) {
        const reply = parse(data, at);
        if (!reply) return;
        replies.push(reply.value);
        at = reply.end;
      }
      sock.destroy();
      resolve(replies);
    });
    sock.once("error", reject);
  });
}

/** One command, as pipeline(); rejects with the server's error. */
async function command(port, ...args) {
  const [reply] = await pipeline(port, args);
  if (reply instanceof Error) throw reply;
  return reply;
}

/** A RESP2 reply at `at` of `buf`: { value, end }, or null while incomplete. */
function parse(buf, at) {
  const eol = buf.indexOf("\r\n", at);
  if (eol === -1) return null;
  const line = buf.toString("utf8", at + 1, eol);
  const next = eol + 2;
  switch (String.fromCharCode(buf[at])) {
    case "+":
      return { value: line, end: next };
    case "-":
      return { value: new Error(line), end: next };
    case ":":
      return { value: Number(line), end: next };
    case "$": {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      if (buf.length < next + n + 2) return null;
      return { value: buf.toString("utf8", next, next + n), end: next + n + 2 };
    }
    case "*": {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      const out = [];
      let pos = next;
      for (let i = 0; i < n; i++) {
        const item = parse(buf, pos);
        if (!item) return null;
        out.push(item.value);
        pos = item.end;
      }
      return { value: out, end: pos };
    }
    default:
      throw new Error(`unexpected reply: ${buf.toString()}`);
  }
}

/** Polls `predicate` (server state that no event announces) until true, within `ms`. */
async function eventually(predicate, ms = 10000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await predicate().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${what} not reached within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20)); // polling: the cluster's gossip has no event to await
  }
}

/**
 * A Redis Cluster of three masters, each with one replica (`replicas: false`: none), on free
 * loopback ports, the module loaded. stop() kills every node and removes their directories.
 */
class Cluster {
  static async start({ replicas = true } = {}) {
    const cluster = new Cluster();
    try {
      const args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"];
      cluster.masters = await Promise.all([0, 1, 2].map(() => Server.start(args)));
      cluster.replicas = replicas ? await Promise.all([0, 1, 2].map(() => Server.start(args))) : [];
      const all = [...cluster.masters, ...cluster.replicas];
      for (const n of all) n.id = await command(n.port, "CLUSTER", "MYID");
      const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
      for (const [i, m] of cluster.masters.entries()) {
        const slots = [];
        for (let s = ranges[i][0]; s <= ranges[i][1]; s++) slots.push(s);
        await command(m.port, "CLUSTER", "ADDSLOTS", ...slots);
        // Distinct config epochs at once, as redis-cli --cluster create sets them.
        await command(m.port, "CLUSTER", "SET-CONFIG-EPOCH", String(i + 1));
      }
      for (const n of all.slice(1)) await command(n.port, "CLUSTER", "MEET", "127.0.0.1", String(all[0].port));
      await eventually(async () => {
        for (const n of all) {
          const nodes = await command(n.port, "CLUSTER", "NODES");
          if (nodes.trim().split("\n").length !== all.length || nodes.includes("handshake")) return false;
        }
        return true;
      }, 20000, "every node knowing every other");
      for (const [i, r] of cluster.replicas.entries()) await command(r.port, "CLUSTER", "REPLICATE", cluster.masters[i].id);
      await eventually(async () => {
        for (const n of all) if (!(await command(n.port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
        for (const r of cluster.replicas) if (!(await command(r.port, "INFO", "replication")).includes("master_link_status:up")) return false;
        return true;
      }, 20000, "cluster_state:ok with every replica in sync");
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  constructor() {
    this.masters = [];
    this.replicas = [];
  }

  get nodes() {
    return [...this.masters, ...this.replicas];
  }

  /** The master that serves `slot` now, as CLUSTER SLOTS of a live node says. */
  async masterOf(slot) {
    for (const n of this.nodes) {
      if (n.proc.exitCode !== null || n.proc.signalCode !== null) continue;
      const ranges = await command(n.port, "CLUSTER", "SLOTS");
      for (const [first, last, [, port]] of ranges) if (slot >= first && slot <= last) return this.nodes.find((x) => x.port === port);
    }
    throw new Error(`no node serves slot ${slot}`);
  }

  async stop() {
    await Promise.all(this.nodes.map((n) => n.stop()));
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

module.exports = { Server, Cluster, LIBRARIES, REPO, modulePath, command, pipeline, eventually };

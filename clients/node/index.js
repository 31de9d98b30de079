// Locks for the redislock Redis module, for ioredis and node-redis, on one server or a Redis
// Cluster (see index.d.ts and docs/clients.md). The lock's own replies are read as strings and
// Buffers on the library's own connections, never as JavaScript numbers, so fences stay exact
// past 2^53; the command run inside call()/fenced() answers as the client library answers it.
"use strict";

const crypto = require("node:crypto");

const {
  LockError,
  LockBusyError,
  LockLostError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
  LockTimeoutError,
  NotReplicatedError,
  CrossSlotError,
} = require("./errors");
const durable = require("./durable");
const { Election } = require("./election");
const multi = require("./multi");
// The release, one number for the module and both clients (Cargo.toml's; a test checks they agree).
const { version } = require("./package.json");

const newToken = () => crypto.randomBytes(16).toString("hex");

function errorText(err) {
  return String((err && err.message) || err);
}

function isUnsupported(err) {
  const text = errorText(err).toLowerCase();
  return text.includes("unknown command") || text.includes("unknown option");
}

// The server's answers to a request that does not fit the key (src/core/errors.rs).
const KIND_MISMATCH =
  /^(?:ERR )?(?:the key is a semaphore with LIMIT (\d+):|the key is a read\/write lock \(exclusive or SHARED holds\), not a semaphore|(this token already holds the key in another mode))/;

/** The lock errors that the server's NOTOWNER and STALEFENCE answers stand for, or null. */
function lockErrorOf(err, name, what) {
  const text = errorText(err);
  if (text.startsWith("NOTOWNER")) return new LockLostError(`cannot ${what}: ${text}`, name);
  if (text.startsWith("STALEFENCE")) {
    const numbers = text.match(/\d+/g) || [];
    return new StaleFenceError(
      text,
      name,
      numbers.length ? BigInt(numbers[0]) : undefined,
      numbers.length > 1 ? BigInt(numbers[numbers.length - 1]) : undefined,
    );
  }
  return null;
}

/** A server error to one of the lock's own commands as the library's error, where it has one. */
function translate(err, name, what) {
  const text = errorText(err);
  if (isUnsupported(err)) return new UnsupportedError(`${what} is not supported by this server: ${text}`, name);
  const kind = text.match(KIND_MISMATCH);
  if (kind) return new LockKindError(text.replace(/^ERR /, ""), name, kind[1] === undefined ? undefined : Number(kind[1]), kind[2] !== undefined);
  return lockErrorOf(err, name, what) || err;
}

/**
 * The error of a guarded command (LOCK.CALL, LOCK.FENCE): NOTOWNER and STALEFENCE are the lock's;
 * a server that does not know the guard itself answers UnsupportedError; everything else is the
 * inner command's own error, as the client library gives it.
 */
function translateGuarded(err, name, what, guard) {
  const text = errorText(err);
  if (new RegExp(`unknown command '${guard.replace(".", "\\.")}'`, "i").test(text)) {
    return new UnsupportedError(`${what} is not supported by this server: ${text}`, name);
  }
  return lockErrorOf(err, name, what) || err;
}

const str = (v) => (Buffer.isBuffer(v) ? v.toString() : v == null ? v : String(v));

/** A value as given, for an error message: strings quoted, with their type where it misleads. */
function shown(value) {
  if (typeof value === "string") return `${JSON.stringify(value)} (a string)`;
  if (typeof value === "bigint") return `${value}n`;
  if (value === null || value === undefined || typeof value === "number" || typeof value === "boolean") return String(value);
  return `a value of type ${typeof value === "object" ? (value.constructor && value.constructor.name) || "object" : typeof value}`;
}

function checkName(name, what = "name") {
  if (typeof name === "string" || Buffer.isBuffer(name)) return name;
  throw new TypeError(`${what} must be a string or a Buffer, not ${shown(name)}`);
}

function positiveMs(value, what) {
  if (typeof value !== "number") throw new TypeError(`${what} must be a positive integer of milliseconds, not ${shown(value)}`);
  if (!Number.isInteger(value) || value <= 0) throw new RangeError(`${what} must be a positive integer of milliseconds, not ${value}`);
  return value;
}

function fenceArg(fence) {
  if (typeof fence === "bigint" || (typeof fence === "number" && Number.isSafeInteger(fence)) || (typeof fence === "string" && /^\d+$/.test(fence))) {
    const value = BigInt(fence);
    if (value >= 0n) return value.toString();
  }
  throw new TypeError(`fence must be a bigint, a safe integer or a string of digits (a hold's fence), not ${shown(fence)}`);
}

// --- the clock: one timer for every hold, renewal and bounded call of the process --------------------

/** The lock's moments: a monotonic clock in ms (performance.now()), immune to wall-clock steps. */
const now = () => performance.now();

/**
 * Every deadline of the library (lease ends, renewals, the bounds of its calls) is an entry of
 * one heap, served by a single timer set for the earliest: any number of holds cost one timer.
 * The timer is unref'd: the locker's connections keep the process alive while it works.
 */
class Clock {
  constructor() {
    this.heap = [];
    this.timer = null;
    this.timerAt = Infinity;
    this.cancelled = 0;
  }

  /** Runs `fn` at `at` (now() ms); returns the entry, for cancel(). */
  at(at, fn) {
    const entry = { at, fn };
    const heap = this.heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].at <= at) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = entry;
    if (at < this.timerAt) this.arm();
    return entry;
  }

  cancel(entry) {
    if (!entry || !entry.fn) return;
    entry.fn = null;
    // Cancelled entries leave the heap when they come up, or all at once when they are most of it.
    if (++this.cancelled > 64 && this.cancelled > this.heap.length / 2) this.compact();
  }

  compact() {
    const live = this.heap.filter((e) => e.fn);
    this.heap = [];
    this.cancelled = 0;
    for (const e of live.sort((a, b) => a.at - b.at)) this.heap.push(e); // sorted: a valid heap
    this.arm();
  }

  pop() {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const c = l + 1 < heap.length && heap[l + 1].at < heap[l].at ? l + 1 : l;
        if (heap[c].at >= last.at) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = last;
    }
    return top;
  }

  arm() {
    while (this.heap.length && !this.heap[0].fn) {
      this.pop();
      this.cancelled--;
    }
    const next = this.heap.length ? this.heap[0].at : Infinity;
    if (next === this.timerAt && this.timer) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = next;
    if (next === Infinity) return;
    // setTimeout takes at most 2^31 - 1 ms; a later entry is looked at again then.
    this.timer = setTimeout(() => this.run(), Math.min(Math.max(0, Math.ceil(next - now())), 2147483647));
    if (typeof this.timer.unref === "function") this.timer.unref();
  }

  run() {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    while (this.heap.length && this.heap[0].at <= t) {
      const entry = this.pop();
      const fn = entry.fn;
      if (!fn) {
        this.cancelled--;
        continue;
      }
      entry.fn = null;
      try {
        fn();
      } catch {
        // an entry's own failure is its own; the others still run
      }
    }
    this.arm();
  }
}

const clock = new Clock();

/** Resolves after `ms`, on the clock. */
const pause = (ms) => new Promise((resolve) => clock.at(now() + ms, resolve));

// --- bounded calls -------------------------------------------------------------------------------
//
// The client libraries queue a command while their connection is down and retry or re-send it
// (ioredis re-sends a command in flight when it reconnects); none of that may outlive a lease or
// a wait. Every command of the locker is therefore raced against the clock: past its bound it
// rejects with LockTimeoutError, whatever the library does with it afterwards.

/**
 * The local clock counts every lease this much shorter than the server (a share plus a constant,
 * as Redlock's clock drift), so that a holder is told of a loss before the server frees the lock.
 */
const CLOCK_DRIFT = 0.01;
const CLOCK_SLACK_MS = 2;
const leaseEnd = (sent, ttlMs) => sent + ttlMs - ttlMs * CLOCK_DRIFT - CLOCK_SLACK_MS;

/** How long after its own timeout the answer to a wait may still come (one crossing of the network). */
const WAIT_GRACE_MS = 450;

/** The bound of a command that has no tighter one (a release, a check). */
const COMMAND_TIMEOUT_MS = 5000;

/** Resolves or rejects as `promise`, or rejects with `onTimeout()` after `ms` (Infinity: never). */
function within(promise, ms, onTimeout) {
  promise.catch(() => {}); // a late failure after the timer won is not unhandled
  if (!Number.isFinite(ms)) return promise;
  return new Promise((resolve, reject) => {
    const entry = clock.at(now() + Math.max(0, ms), () => reject(onTimeout()));
    promise.then(
      (v) => {
        clock.cancel(entry);
        resolve(v);
      },
      (e) => {
        clock.cancel(entry);
        reject(e);
      },
    );
  });
}

// How each library says a command's connection went away (ioredis, with maxRetriesPerRequest 0:
// "Reached the max retries per request limit"; node-redis: SocketClosedUnexpectedlyError).
const CONNECTION_LOST = /connection|closed|ECONN|socket|EPIPE|stream|max retries per request|offline|disconnect/i;

// --- Cluster --------------------------------------------------------------------------------------

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

/** The Cluster slot of a key (CRC16 of the key, or of its {hash tag}, modulo 16384). */
function keySlot(key) {
  let bytes = Buffer.isBuffer(key) ? key : Buffer.from(String(key));
  const open = bytes.indexOf(0x7b); // {
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ b) & 0xff];
  return crc & 16383;
}

/** A Cluster redirection: { kind: "MOVED" | "ASK", slot, address }, or null. */
function redirection(err) {
  const m = errorText(err).match(/^(MOVED|ASK) (\d+) (\S+)$/);
  return m ? { kind: m[1], slot: Number(m[2]), address: m[3] } : null;
}

/** A Cluster answer that says "not now, here": retried after a pause (TRYAGAIN, CLUSTERDOWN). */
const RETRY_LATER = /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN)\b/;

/** Pauses between the retries of a Cluster command: short at first, then a quarter of a second. */
const retryPause = (attempt) => Math.min(25 * 2 ** attempt, 250);

// --- connections: one kind per client library -------------------------------------------------------
//
// A connection of the locker's own answers `call()` with bulk strings as Buffers and integers as
// strings (the lock's commands), and `raw()` as the client library answers by default (the
// command inside call() and fenced()). Every command goes through connections of the locker's
// own, never the application's: a blocking call in the application (BLPOP, a slow script) must
// not hold up a renewal. In a Cluster there is one such connection per node, opened from the
// application's client with its options (password, TLS) and the node's address.

const quiet = () => {}; // connection errors surface as rejected commands, not as 'error' events

function splitAddress(address) {
  const at = address.lastIndexOf(":");
  return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
}

// A command that must not be re-sent behind the caller's back when its connection drops (ioredis
// would send it again, whole, on the next connection): it fails, and the locker decides.
const IOREDIS_ONCE = { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, enableOfflineQueue: true };

class IoredisConnection {
  constructor(source, options) {
    this.source = source;
    this.options = options;
    this.conn = source.duplicate(options);
    if (typeof this.conn.on === "function") this.conn.on("error", quiet);
    this.rawConn = null;
  }

  // `asking`: ASKING first, on the same connection (a Cluster's ASK redirection).
  call(args, asking = false) {
    if (asking) this.conn.call("ASKING").catch(() => {});
    return this.conn.callBuffer(String(args[0]), ...args.slice(1));
  }

  // The application's options as they are (stringNumbers or not): the reply ioredis gives.
  raw(args, asking = false) {
    if (!this.rawConn) {
      const { stringNumbers, ...options } = this.options;
      void stringNumbers;
      this.rawConn = this.source.duplicate(options);
      if (typeof this.rawConn.on === "function") this.rawConn.on("error", quiet);
    }
    if (asking) this.rawConn.call("ASKING").catch(() => {});
    return this.rawConn.call(String(args[0]), ...args.slice(1));
  }

  ready() {
    const conn = this.conn;
    if (conn.status === undefined || conn.status === "ready") return Promise.resolve();
    if (conn.status === "end") return Promise.reject(new Error("Connection is closed."));
    return new Promise((resolve, reject) => {
      const ok = () => {
        conn.removeListener("end", gone);
        resolve();
      };
      const gone = () => {
        conn.removeListener("ready", ok);
        reject(new Error("Connection is closed."));
      };
      conn.once("ready", ok);
      conn.once("end", gone);
    });
  }

  get alive() {
    return this.conn.status !== "end";
  }

  destroy() {
    for (const c of [this.conn, this.rawConn]) if (c) c.disconnect();
  }

  async close() {
    await Promise.all(
      [this.conn, this.rawConn].filter(Boolean).map((c) => within(Promise.resolve().then(() => c.quit()), 1000, () => new Error("quit")).catch(() => c.disconnect())),
    );
  }
}

class IoredisConnector {
  constructor(client) {
    this.client = client;
    this.cluster = client.isCluster === true;
    this.baseClient = null;
  }

  /** A node client of the application's Cluster, whose options the locker's connections take. */
  async base() {
    if (this.baseClient) return this.baseClient;
    const nodes = () => this.client.nodes("all");
    if (!nodes().length) {
      await within(
        new Promise((resolve) => this.client.once("ready", resolve)),
        COMMAND_TIMEOUT_MS,
        () => new LockTimeoutError("the ioredis Cluster did not connect within 5 s"),
      );
    }
    this.baseClient = nodes()[0];
    return this.baseClient;
  }

  async open(address, blocking) {
    const extra = blocking ? IOREDIS_ONCE : {};
    if (!this.cluster) return new IoredisConnection(this.client, { stringNumbers: true, lazyConnect: false, ...extra });
    const { host, port } = splitAddress(address);
    // No reconnection of its own: a node that went away is looked up again in the topology.
    return new IoredisConnection(await this.base(), {
      host,
      port,
      stringNumbers: true,
      lazyConnect: false,
      retryStrategy: null,
      readOnly: false,
      ...extra,
    });
  }

  seeds() {
    const out = [];
    for (const n of this.client.nodes("master")) out.push(`${n.options.host}:${n.options.port}`);
    for (const n of this.client.startupNodes || []) {
      if (typeof n === "number") out.push(`127.0.0.1:${n}`);
      else if (typeof n === "string") out.push(/:\d+$/.test(n) ? n.replace(/^rediss?:\/\/([^@]*@)?/, "") : `${n}:6379`);
      else if (n && typeof n === "object") out.push(`${n.host || "127.0.0.1"}:${n.port || 6379}`);
    }
    return out;
  }
}

// RESP type codes (the protocol's own first bytes): ':' integer, '$' bulk string, '+' simple
// string, '%' map. Integers as strings, strings as Buffers, maps as flat arrays. No command
// timeout of the library's (the locker bounds each command itself, waits included).
const NODE_REDIS_OPTIONS = { typeMapping: { 58: String, 36: Buffer, 43: Buffer, 37: Array }, timeout: 0 };

class NodeRedisConnection {
  constructor(conn) {
    this.conn = conn;
    conn.on("error", quiet);
    this.connecting = conn.connect();
    this.connecting.catch(() => {});
  }

  async call(args, asking = false) {
    await this.connecting;
    if (asking) this.conn.sendCommand(["ASKING"]).catch(() => {});
    return this.conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))), NODE_REDIS_OPTIONS);
  }

  async raw(args, asking = false) {
    await this.connecting;
    if (asking) this.conn.sendCommand(["ASKING"]).catch(() => {});
    return this.conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))));
  }

  ready() {
    return this.connecting.then(() => undefined);
  }

  get alive() {
    return this.conn.isOpen !== false;
  }

  destroy() {
    try {
      this.conn.destroy ? this.conn.destroy() : this.conn.disconnect();
    } catch {
      // already closed
    }
  }

  async close() {
    await within(
      Promise.resolve().then(() => (this.conn.close ? this.conn.close() : this.conn.quit())),
      1000,
      () => new Error("quit"),
    ).catch(() => this.destroy());
  }
}

class NodeRedisConnector {
  constructor(client) {
    this.client = client;
    this.cluster = typeof client.nodeClient === "function";
    this.baseClient = null;
  }

  async open(address, blocking) {
    void blocking;
    if (!this.cluster) return new NodeRedisConnection(this.client.duplicate());
    if (!this.baseClient) {
      const masters = this.client.masters || [];
      if (!masters.length) throw new LockError("the node-redis cluster client is not connected (await cluster.connect())");
      this.baseClient = await this.client.nodeClient(masters[0]);
    }
    const base = this.baseClient;
    const { host, port } = splitAddress(address);
    const socket = { ...((base.options && base.options.socket) || {}), host, port, reconnectStrategy: false };
    return new NodeRedisConnection(base.duplicate({ socket }));
  }

  seeds() {
    return (this.client.masters || []).map((m) => `${m.host}:${m.port}`);
  }
}

function connectorFor(client) {
  if (client && typeof client === "object" && typeof client.duplicate === "function") {
    if (typeof client.callBuffer === "function") return new IoredisConnector(client);
    if (typeof client.sendCommand === "function") return new NodeRedisConnector(client);
  }
  throw new TypeError("redislock needs an ioredis client (Redis or Cluster) or a connected node-redis 6 client (createClient or createCluster)");
}

/** True for an error the server answered (not one of the connection). */
function isReply(err) {
  for (let p = err && Object.getPrototypeOf(err); p; p = Object.getPrototypeOf(p)) {
    const kind = p.constructor && p.constructor.name;
    if (kind === "ReplyError" || kind === "ErrorReply") return true; // ioredis, node-redis
  }
  return false;
}

/**
 * The follow-ups of a reply (`follow.commands`, each sent by `call` on the connection that gave
 * it, each bounded by `follow.boundMs`), when the reply wrote something: { value: { reply,
 * results }, healthy }. `results` holds each reply or error (null when none was sent); a
 * follow-up without an answer leaves the connection unfit for use, and the rest are not sent.
 */
async function followUp(follow, reply, call) {
  if (!durable.wanted(reply)) return { value: { reply, results: null }, healthy: true };
  const results = [];
  for (const command of follow.commands) {
    try {
      results.push(await within(call(command), follow.boundMs, () => new LockTimeoutError(`${command[0]}: no answer within ${follow.boundMs} ms`)));
    } catch (err) {
      results.push(err);
      if (!isReply(err)) return { value: { reply, results }, healthy: false };
    }
  }
  return { value: { reply, results }, healthy: true };
}

/**
 * The locker's connections: in a Cluster, one per node for commands and a pool per node for
 * waits, with the slot table the locker keeps itself (from CLUSTER SLOTS and MOVED answers).
 */
class Connections {
  constructor(connector) {
    this.connector = connector;
    this.cluster = connector.cluster;
    this.mains = new Map(); // address (null outside Cluster) → connection
    this.idle = new Map(); // address → connections free for a wait
    this.all = new Set();
    this.slots = new Array(16384);
    this.refreshing = null;
    this.closed = false;
    if (this.cluster) this.refresh();
    else this.main(null).catch(() => {}); // connected at once: a renewal must not wait for a handshake
  }

  track(conn) {
    this.all.add(conn);
    return conn;
  }

  forget(conn) {
    if (!conn) return;
    this.all.delete(conn);
    for (const [address, c] of this.mains) if (c === conn) this.mains.delete(address);
    conn.destroy();
  }

  /** The connection that commands for `address` go through (opened when missing or gone). */
  main(address) {
    let entry = this.mains.get(address);
    if (entry && entry.settled && !entry.conn.alive) {
      this.forget(entry.conn);
      entry = undefined;
    }
    if (!entry) {
      entry = { settled: false, conn: null };
      entry.promise = this.connector.open(address, false).then(
        (conn) => {
          entry.settled = true;
          entry.conn = this.track(conn);
          if (this.closed) conn.destroy();
          return conn;
        },
        (err) => {
          if (this.mains.get(address) === entry) this.mains.delete(address);
          throw err;
        },
      );
      this.mains.set(address, entry);
    }
    return entry.promise;
  }

  addressFor(key) {
    if (!this.cluster) return null;
    if (key !== undefined) {
      const address = this.slots[keySlot(key)];
      if (address) return address;
    }
    return this.known()[0];
  }

  /** Every address known: the slot table's, the application client's, the connections'. */
  known() {
    const out = new Set();
    for (const a of this.slots) if (a) out.add(a);
    for (const a of this.connector.seeds()) out.add(a);
    for (const a of this.mains.keys()) out.add(a);
    if (!out.size) throw new LockError("no node of the Cluster is known");
    return [...out];
  }

  /** Reads the slot table again (CLUSTER SLOTS) from the first node that answers. */
  refresh() {
    if (!this.cluster || this.closed) return Promise.resolve(false);
    if (!this.refreshing) {
      this.refreshing = this.readSlots().finally(() => {
        this.refreshing = null;
      });
      this.refreshing.catch(() => {});
    }
    return this.refreshing;
  }

  async readSlots() {
    for (const address of this.known()) {
      try {
        const conn = await within(this.main(address), 1000, () => new Error("connect"));
        await within(conn.ready(), 1000, () => new Error("connect"));
        const reply = await within(conn.call(["CLUSTER", "SLOTS"]), 1000, () => new Error("CLUSTER SLOTS"));
        const slots = new Array(16384);
        for (const range of reply) {
          const [first, last, master] = range;
          let host = str(master[0]);
          if (!host || host === "?") host = splitAddress(address).host;
          const to = `${host}:${str(master[1])}`;
          for (let s = Number(str(first)); s <= Number(str(last)); s++) slots[s] = to;
        }
        this.slots = slots;
        return true;
      } catch {
        const entry = this.mains.get(address);
        if (entry && entry.settled && !entry.conn.alive) this.forget(entry.conn);
      }
    }
    return false;
  }

  /**
   * Sends one command for `key` within `ms`, rejecting with `onTimeout()` past it. In a Cluster
   * it follows MOVED and ASK, waits out TRYAGAIN and CLUSTERDOWN, and looks the node up again
   * when it is not reachable (a failover), until the time is up; a command whose connection
   * dropped after it was sent is sent again only if `resend`.
   */
  async send(args, key, ms, onTimeout, { raw = false, resend = true, follow = null } = {}) {
    const deadline = now() + ms;
    if (!this.cluster) {
      if (follow) return this.exchange(await within(this.lend(null), ms, onTimeout), args, deadline, onTimeout, follow, false);
      const conn = await within(this.main(null), ms, onTimeout);
      return within(raw ? conn.raw(args) : conn.call(args), deadline - now(), onTimeout);
    }
    let ask = null;
    for (let attempt = 0; ; attempt++) {
      const address = ask || this.addressFor(key);
      const asking = ask !== null;
      ask = null;
      let conn = null;
      let sent = false;
      try {
        if (follow) {
          const lent = await within(this.lend(address), deadline - now(), onTimeout);
          sent = true;
          return await this.exchange(lent, args, deadline, onTimeout, follow, asking);
        }
        conn = await within(this.main(address), deadline - now(), onTimeout);
        await within(conn.ready(), deadline - now(), onTimeout);
        sent = true;
        return await within(raw ? conn.raw(args, asking) : conn.call(args, asking), deadline - now(), onTimeout);
      } catch (err) {
        if (err instanceof LockError) throw err;
        const to = redirection(err);
        const text = errorText(err);
        if (to && to.kind === "MOVED") {
          this.slots[to.slot] = to.address;
          this.refresh();
        } else if (to) {
          ask = to.address;
        } else if (RETRY_LATER.test(text)) {
          // the slot is moving, or the cluster is electing a new master: again shortly
        } else if (!isReply(err) && (!sent || (resend && CONNECTION_LOST.test(text)))) {
          if (conn && !conn.alive) this.forget(conn);
          this.refresh();
        } else {
          throw err;
        }
        const wait = to && attempt < 3 ? 0 : retryPause(attempt);
        if (now() + wait >= deadline) throw Object.assign(onTimeout(), { cause: err });
        if (wait) await pause(wait);
      }
    }
  }

  /**
   * One command on a lent connection (`lend()`), then its follow-ups (`follow`: WAIT, WAITAOF) on
   * the same connection: { reply, results } (see followUp()). Lent, not the shared connection:
   * a WAIT blocks its connection for up to its timeout.
   */
  async exchange(lent, args, deadline, onTimeout, follow, asking) {
    let healthy = false;
    try {
      const reply = await within(lent.call(args, asking), deadline - now(), onTimeout);
      const out = await followUp(follow, reply, (a) => lent.call(a));
      healthy = out.healthy;
      return out.value;
    } catch (err) {
      healthy = isReply(err);
      throw err;
    } finally {
      lent.done(healthy);
    }
  }

  /** A connection of its own for a wait at `address`, with its CLIENT ID (for CLIENT UNBLOCK). */
  async lend(address) {
    const idle = this.idle.get(address) || [];
    let conn;
    while ((conn = idle.pop())) if (conn.alive) break;
    if (!conn) {
      conn = this.track(await this.connector.open(address, true));
      try {
        if (this.cluster) await conn.ready();
        conn.id = str(await conn.call(["CLIENT", "ID"]));
      } catch (err) {
        this.forget(conn);
        throw err;
      }
    }
    return {
      conn,
      call: (args, asking) => conn.call(args, asking),
      drop: () => this.forget(conn),
      done: (healthy) => {
        if (!healthy || this.closed || !conn.alive) return this.forget(conn);
        if (!this.idle.has(address)) this.idle.set(address, []);
        this.idle.get(address).push(conn);
      },
    };
  }

  async close() {
    this.closed = true;
    const all = [...this.all];
    this.all.clear();
    this.mains.clear();
    this.idle.clear();
    await Promise.all(all.map((c) => c.close()));
  }
}

// --- replies ---------------------------------------------------------------------------------------

function parseGrant(reply, name) {
  if (reply == null) return null;
  if (!Array.isArray(reply) || reply.length !== 2) throw new LockError(`unexpected LOCK.ACQUIRE reply: ${reply}`, name);
  return { token: str(reply[0]), fence: BigInt(str(reply[1])) };
}

function pairs(reply) {
  if (reply instanceof Map) return [...reply.entries()];
  if (Array.isArray(reply)) {
    const out = [];
    for (let i = 0; i + 1 < reply.length; i += 2) out.push([reply[i], reply[i + 1]]);
    return out;
  }
  return Object.entries(reply);
}

const INTEGER_FIELDS = new Set(["fence", "ttl", "waiters", "limit", "client"]);

function parseInfo(reply) {
  if (reply == null) return null;
  const info = {};
  for (const [k, v] of pairs(reply)) {
    const key = str(k);
    if (key === "holders" && Array.isArray(v)) {
      info.holders = v.map((h) => parseInfo(h));
    } else if (key === "fence") {
      info.fence = BigInt(str(v));
    } else if (INTEGER_FIELDS.has(key)) {
      info[key] = Number(str(v));
    } else {
      info[key] = str(v);
    }
  }
  return info;
}

/** The most places a semaphore (`limit`) may have. */
const MAX_LIMIT = 1000000;

function modeArgs(opts) {
  const args = [];
  if (opts.shared && opts.limit !== undefined) throw new RangeError("shared and limit exclude each other");
  if (opts.shared) args.push("SHARED");
  if (opts.limit !== undefined) {
    if (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_LIMIT) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${shown(opts.limit)}`);
    }
    args.push("LIMIT", opts.limit);
  }
  if (opts.ephemeral) args.push("EPHEMERAL");
  return args;
}

// --- holds -------------------------------------------------------------------------------------------

/** How soon a renewal that was not answered is tried again (while the lease may still run). */
const retryRenewal = (ttlMs) => Math.min(Math.max(ttlMs / 20, 10), 250);

class Hold {
  constructor(locker, name, token, fence, ttlMs, sent, onLost, durability = null) {
    this.locker = locker;
    /** The acknowledgements each extension must get to count (`replicas`, `aof*`), or null. */
    this.durability = durability;
    this.name = name;
    this.token = token;
    this.fence = fence;
    this.ttl = ttlMs;
    this.released = false;
    this.lossEntry = null;
    this.renewEntry = null;
    this.renewTtl = 0;
    this.onLost = typeof onLost === "function" ? onLost : null;
    const controller = new AbortController();
    this.abortSignal = (err) => controller.abort(err);
    /** Aborted (reason: LockLostError) when the hold is known lost, or its lease ran out unrenewed. */
    this.signal = controller.signal;
    this.setLease(sent, ttlMs);
  }

  /** The lease clock: a lease of `ttlMs` set by a request sent at `sent` (now()) ends no earlier. */
  setLease(sent, ttlMs) {
    this.leaseSent = sent;
    this.leaseEnd = leaseEnd(sent, ttlMs);
    /** The lease's conservative local end, in ms since the epoch (as npm redlock's `expiration`). */
    this.expiration = Date.now() + (this.leaseEnd - now());
    this.watch();
  }

  // At the lease's conservative end, unless a renewal moved it: the hold is lost.
  watch() {
    clock.cancel(this.lossEntry);
    this.lossEntry = null;
    if (this.released || this.signal.aborted) return;
    this.lossEntry = clock.at(this.leaseEnd, () => {
      this.lossEntry = null;
      if (this.leaseLeft > 0) return this.watch();
      this.lose(new LockLostError(`${this.name}: no renewal was answered before the lease ran out`, this.name));
    });
  }

  /** Signals the loss once: `signal` aborts with `err`, then `onLost(err, hold)` runs. */
  lose(err) {
    if (this.released || this.signal.aborted) return;
    this.stopRenewing();
    clock.cancel(this.lossEntry);
    this.lossEntry = null;
    this.leaseEnd = Math.min(this.leaseEnd, now());
    this.abortSignal(err);
    if (this.onLost) {
      try {
        this.onLost(err, this);
      } catch (e) {
        queueMicrotask(() => {
          throw e; // the application's callback failed: as any uncaught error of its own
        });
      }
    }
  }

  /** Milliseconds left on the lease by the local clock (0 once it ran out). */
  get leaseLeft() {
    return Math.max(0, this.leaseEnd - now());
  }

  /**
   * Resets the lease to `ttlMs` (default: the acquire's TTL) from now; LockLostError if gone,
   * LockTimeoutError if no answer came within `timeoutMs` (default: the lease time left, at least 1 s).
   */
  async extend(ttlMs = this.ttl, timeoutMs = Math.max(this.leaseLeft, 1000)) {
    positiveMs(ttlMs, "ttlMs");
    if (this.released) throw new LockLostError(`cannot extend ${this.name}: it was released`, this.name);
    const sent = now();
    const d = this.durability;
    let reply;
    try {
      const follow = d && durable.follow(d, Math.min(ttlMs, timeoutMs));
      reply = await this.locker.send(["LOCK.EXTEND", this.name, this.token, "PX", ttlMs], this.name, timeoutMs, "extend", { follow });
    } catch (err) {
      const e = translate(err, this.name, "extend");
      if (e instanceof LockLostError) this.lose(e);
      throw e;
    }
    if (str(d ? reply.reply : reply) !== "1") {
      const e = new LockLostError(`cannot extend ${this.name}: the lock is no longer held by this token`, this.name);
      this.lose(e);
      throw e;
    }
    if (d) {
      // Not acknowledged by the replicas asked for: it does not count, the lease clock stays.
      const acks = durable.acks(d, reply);
      if (!acks.ok) throw durable.shortfall(d, acks, this.name, "extension");
    }
    if (this.signal.aborted) return this; // answered after the lease clock had given it up
    this.ttl = ttlMs;
    this.setLease(sent, ttlMs);
    return this;
  }

  /** Renews every third of `ttlMs`, a third after each renewal was sent, until release or loss. */
  renewEvery(ttlMs) {
    this.renewTtl = ttlMs;
    this.scheduleRenewal(this.leaseSent + ttlMs / 3);
  }

  scheduleRenewal(at) {
    clock.cancel(this.renewEntry);
    this.renewEntry = null;
    if (!this.renewTtl || this.released || this.signal.aborted) return;
    this.renewEntry = clock.at(at, () => {
      this.renewEntry = null;
      this.renew();
    });
  }

  async renew() {
    const ttlMs = this.renewTtl;
    try {
      await this.extend(ttlMs, this.leaseLeft);
      this.scheduleRenewal(this.leaseSent + ttlMs / 3); // a third after the request: RTT included
    } catch (err) {
      if (err instanceof LockLostError) return; // extend() signalled it
      // Not answered, not reachable, or not acknowledged by the replicas asked for: again soon,
      // while the lease may still run.
      if (this.leaseLeft > 0) this.scheduleRenewal(now() + retryRenewal(ttlMs));
    }
  }

  stopRenewing() {
    this.renewTtl = 0;
    clock.cancel(this.renewEntry);
    this.renewEntry = null;
  }

  /**
   * Gives the lock back: true if it was still held, false if it had already been lost. Within the
   * lease time left (at least 1 s): then LockTimeoutError, and the hold can be released again.
   */
  async release() {
    if (this.released) return false;
    this.released = true;
    const renewing = this.renewTtl;
    this.stopRenewing();
    clock.cancel(this.lossEntry);
    this.lossEntry = null;
    let reply;
    try {
      reply = await this.locker.send(["LOCK.RELEASE", this.name, this.token], this.name, Math.max(this.leaseLeft, 1000), "release");
    } catch (err) {
      this.released = false;
      this.watch();
      if (renewing) this.renewEvery(renewing);
      throw translate(err, this.name, "release");
    }
    this.leaseEnd = 0;
    return str(reply) === "1";
  }

  /** True if the key still has this hold: its token among the holders, with this grant's fence. */
  async owned() {
    if (this.released || this.leaseLeft === 0) return false;
    const info = await this.locker.info(this.name);
    if (!info) return false;
    const holders = info.holders || (info.token === undefined ? [] : [info]);
    return holders.some((h) => h.token === this.token && h.fence === this.fence);
  }

  /**
   * Runs `command` atomically if this hold is still the lock's (LOCK.CALL). Its reply, or its
   * error, is the client library's own; LockLostError if the hold is gone.
   */
  async call(...command) {
    if (command.length === 0) throw new TypeError("call() needs a command");
    try {
      return await this.locker.send(["LOCK.CALL", this.name, this.token, ...command], this.name, COMMAND_TIMEOUT_MS, "call", { raw: true, resend: false });
    } catch (err) {
      throw translateGuarded(err, this.name, "call", "LOCK.CALL");
    }
  }
}

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new LockError("aborted");
}

// --- the locker ----------------------------------------------------------------------------------------

class Locker {
  /**
   * @param client an ioredis client (Redis or Cluster) or a connected node-redis client
   * (createClient or createCluster)
   */
  constructor(client) {
    this.conns = new Connections(connectorFor(client));
    /** The kinds of WAITAOF (with numlocal or without) the server was found to answer. */
    this.aofChecked = new Set();
    /** Waits in progress, each with the function that ends it (quit() ends them all). */
    this.waits = new Set();
    this.closed = false;
  }

  /** One command for `name` on the locker's own connections, rejected with LockTimeoutError after `ms`. */
  send(args, name, ms, what, opts) {
    const onTimeout = () => new LockTimeoutError(`${what} of ${name}: no answer within ${Math.round(ms)} ms`, name);
    return this.conns.send(args, name, ms, onTimeout, opts);
  }

  /** Takes the lock `name` for `ttlMs`; LockBusyError if it is not granted (within `wait`). */
  async acquire(name, ttlMs, opts = {}) {
    const hold = await this.tryAcquire(name, ttlMs, opts);
    if (!hold && Array.isArray(name)) throw multi.busy(name, opts);
    if (!hold) {
      throw new LockBusyError(
        opts.wait ? `${name} was not granted within ${opts.wait} ms` : `${name} is held by another token`,
        name,
      );
    }
    return hold;
  }

  /**
   * As acquire(), but resolves to null when the lock is not granted. `signal` (an AbortSignal)
   * ends a wait: the server drops the waiter (CLIENT UNBLOCK, else its connection is closed),
   * then the call rejects with the signal's reason. A wait whose connection drops is sent again
   * once, with the time left; one that a Cluster moves (MOVED, ASK, TRYAGAIN) is sent to the
   * node that serves the key, with the time left; it never outlives `wait` by more than the
   * network's round trip.
   */
  async tryAcquire(name, ttlMs, opts = {}, extra = null) {
    if (Array.isArray(name)) return multi.tryAcquireAll(this, name, ttlMs, opts, MULTI_TOOLS, MultiHold);
    checkName(name);
    positiveMs(ttlMs, "ttlMs");
    if (opts === null || typeof opts !== "object") throw new TypeError(`the options must be an object, not ${shown(opts)}`);
    if (this.closed) throw new LockError("the locker was closed (quit)", name);
    const signal = opts.signal;
    if (signal && signal.aborted) throw abortReason(signal);
    if (opts.onLost !== undefined && typeof opts.onLost !== "function") throw new TypeError(`onLost must be a function, not ${shown(opts.onLost)}`);
    const token = opts.token === undefined ? newToken() : String(opts.token);
    // `extra` (an election's campaign): { args } more options (DATA), { keep } receives the
    // connection that waited for the grant, kept out of the pool (the hold is bound to it).
    const args = ["LOCK.ACQUIRE", name, token, "PX", ttlMs, ...modeArgs(opts), ...(extra ? extra.args : [])];
    const wait = opts.wait === undefined ? 0 : opts.wait;
    if (!(wait === 0 || wait === Infinity || (typeof wait === "number" && wait > 0))) {
      throw new (typeof wait === "number" ? RangeError : TypeError)(`wait must be a number of milliseconds, not ${shown(wait)}`);
    }
    const d = durable.durability(opts);
    if (d) await durable.check(d, name, this.aofChecked, (args) => this.send(args, name, COMMAND_TIMEOUT_MS, "check"));
    // With `replicas`/`aof*`: WAIT/WAITAOF after the grant, on the connection that received it.
    const follow = d && durable.follow(d, ttlMs);
    const unwrap = (r) => (follow && r ? r.reply : r);
    let sent = now();
    let reply;
    if (wait === 0) {
      try {
        reply = await this.send(args, name, COMMAND_TIMEOUT_MS, "acquire", { follow });
      } catch (err) {
        throw translate(err, name, "acquire");
      }
    } else {
      reply = await this.waitFor(name, args, wait, signal, follow, extra && extra.keep);
    }
    let grant = parseGrant(unwrap(reply), name);
    if (!grant) return null;
    if (d) await durable.confirm(d, name, reply, () => this.send(["LOCK.RELEASE", name, grant.token], name, Math.max(d.timeoutMs, 1000), "release"));
    if (wait !== 0 && now() - sent > ttlMs / 10) {
      // Granted after a wait: the lease began at the grant, some time after the request was
      // sent; renew now so that the lease clock counts from a known moment.
      const renewSent = now();
      const renewal = await this.send(["LOCK.EXTEND", name, grant.token, "PX", ttlMs], name, ttlMs, "extend", { follow }).catch(() => null);
      const renewed = unwrap(renewal);
      if (renewed != null && str(renewed) === "1") {
        if (!d || durable.acks(d, renewal).ok) sent = renewSent; // else not acknowledged: it does not count
      } else if (renewal !== null) return null; // gone already: a lease shorter than the round trip
    }
    return new Hold(this, name, grant.token, grant.fence, ttlMs, sent, opts.onLost, d);
  }

  // A wait in the server, on a connection of its own (never the one other commands go through).
  // `giveBack(late)`: gives back a grant that came after the wait was ended (default: LOCK.RELEASE).
  async waitFor(name, args, wait, signal, follow = null, keep = null, giveBack = null) {
    const deadline = wait === Infinity ? Infinity : now() + wait;
    const conns = this.conns;
    let requeued = false;
    let ask = null;
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new LockError("the locker was closed (quit) during the wait", name);
      if (signal && signal.aborted) throw abortReason(signal); // between two sends: no waiter in the server
      const left = deadline === Infinity ? 0 : Math.ceil(deadline - now());
      if (deadline !== Infinity && left <= 0) return null;
      const address = ask || conns.addressFor(name);
      const asking = ask !== null;
      ask = null;
      const noConnection = () => new LockTimeoutError(`${name}: no connection for the wait within ${wait} ms`, name);
      let conn;
      try {
        conn = await within(conns.lend(address), deadline + WAIT_GRACE_MS - now(), noConnection);
      } catch (err) {
        if (err instanceof LockError || this.closed) throw err;
        if (!conns.cluster) {
          // The server did not answer the new connection: as a dropped wait, once more.
          if (requeued) throw Object.assign(new LockError(`${name}: no connection for the wait (${errorText(err)})`, name), { cause: err });
          requeued = true;
          continue;
        }
        conns.refresh(); // a node that is not there (a failover): look the key's node up again
        if (now() + retryPause(attempt) >= deadline) throw Object.assign(noConnection(), { cause: err });
        await pause(retryPause(attempt));
        continue;
      }
      // Ending the wait: `stopped` settles once the server has dropped the waiter.
      let reason;
      let stopped;
      let end;
      const ended = new Promise((_, reject) => {
        end = reject;
      });
      ended.catch(() => {});
      const stop = (why, gently) => {
        if (reason !== undefined) return;
        reason = why;
        stopped = gently ? this.unblock(conn, address) : Promise.resolve(conn.drop());
        stopped.then(() => end(why));
      };
      const onAbort = () => stop(abortReason(signal), true);
      if (signal && signal.aborted) {
        conn.done(true); // aborted while the connection was being found: nothing was sent
        throw abortReason(signal);
      }
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      this.waits.add(stop);
      let healthy = false;
      let kept = false;
      try {
        const answer = conn.call([...args, "BLOCK", left], asking);
        const bound = deadline === Infinity ? Infinity : deadline + WAIT_GRACE_MS - now();
        let reply;
        try {
          reply = await within(Promise.race([answer, ended]), bound, () => {
            conn.drop();
            return new LockTimeoutError(`${name}: no answer to the wait within ${wait} ms`, name);
          });
        } catch (err) {
          if (reason === undefined) throw err;
        }
        if (reason !== undefined) {
          // Ended (abort, quit): the server has dropped the waiter; a grant that came meanwhile
          // is given back.
          await stopped;
          const late = await within(answer, 1000, () => new Error("no answer")).catch(() => null);
          if (giveBack && late && Array.isArray(late)) await Promise.resolve().then(() => giveBack(late)).catch(() => {});
          const grant = !giveBack && late && Array.isArray(late) ? parseGrant(late, name) : null;
          if (grant) await this.send(["LOCK.RELEASE", name, grant.token], name, 1000, "release").catch(() => {});
          healthy = conn.conn.alive;
          throw reason;
        }
        healthy = true;
        kept = keep !== null && reply != null;
        if (!follow) return reply;
        // WAIT/WAITAOF on the connection that waited: it counts the grant's write, made by the
        // call that handed the lock over.
        const out = await followUp(follow, reply, (a) => conn.call(a));
        healthy = out.healthy;
        return out.value;
      } catch (err) {
        if (err === reason || err instanceof LockError || (signal && signal.aborted) || this.closed) throw err;
        const to = conns.cluster ? redirection(err) : null;
        if (to) {
          // The key is served elsewhere now: queued there, with the time left.
          healthy = true;
          if (to.kind === "MOVED") {
            conns.slots[to.slot] = to.address;
            conns.refresh();
          } else {
            ask = to.address;
          }
          continue;
        }
        if (conns.cluster && RETRY_LATER.test(errorText(err))) {
          // The slot moved while waiting (TRYAGAIN): queued again where the key is now.
          healthy = true;
          await pause(retryPause(attempt));
          continue;
        }
        if (CONNECTION_LOST.test(errorText(err)) && !isReply(err)) {
          conns.refresh();
          if (!requeued) {
            requeued = true; // once, with the time left, at the back of the queue
            continue;
          }
          throw Object.assign(new LockError(`${name}: the wait's connection was lost twice (${errorText(err)})`, name), { cause: err });
        }
        throw translate(err, name, "acquire");
      } finally {
        this.waits.delete(stop);
        if (signal) signal.removeEventListener("abort", onAbort);
        if (kept) keep.lent = conn; // a hold bound to it: the caller gives it back (done) or closes it (drop)
        else conn.done(healthy);
      }
    }
  }

  /**
   * Takes a waiter out of the server's queue: CLIENT UNBLOCK, whose answer to the wait comes
   * back before this resolves; if the wait was not blocked (not arrived yet, or answered), its
   * connection is closed and the server told to close it (CLIENT KILL), which drops the waiter.
   */
  async unblock(lent, address) {
    const run = async (args) => {
      const main = await this.conns.main(address);
      return str(await within(main.call(args), 1000, () => new Error("no answer")));
    };
    try {
      if ((await run(["CLIENT", "UNBLOCK", lent.conn.id])) === "1") return;
    } catch {
      // not answered: close it below
    }
    lent.drop();
    await run(["CLIENT", "KILL", "ID", lent.conn.id]).catch(() => {});
  }

  /**
   * Runs `routine(signal, hold)` while holding `name`: the lease is renewed every third of
   * `ttlMs`, and `signal` (the hold's) is aborted (its reason a LockLostError) when a renewal
   * finds the hold gone, or when the lease's conservative local end comes with no renewal
   * answered: before the server can grant the lock to anyone else, whether or not the network
   * answers. The lock is released when the routine settles (within the lease time left, at
   * least 1 s); using() resolves with what the routine returns, lost or not.
   */
  async using(name, ttlMs, optsOrRoutine, maybeRoutine) {
    const opts = typeof optsOrRoutine === "function" ? {} : optsOrRoutine || {};
    const routine = typeof optsOrRoutine === "function" ? optsOrRoutine : maybeRoutine;
    if (typeof routine !== "function") throw new TypeError("using() needs a routine");
    const hold = await this.acquire(name, ttlMs, opts);
    hold.renewEvery(ttlMs);
    try {
      return await routine(hold.signal, hold);
    } finally {
      hold.stopRenewing();
      await hold.release().catch(() => {}); // false, harmlessly, if the hold was lost
    }
  }

  /**
   * LOCK.INFO, or null when nobody holds it: { mode, ttl, waiters, holders: [{ token, fence
   * (bigint), ttl, client }] }, plus token, fence and client for an exclusive lock and limit for
   * a semaphore.
   */
  async info(name) {
    checkName(name);
    return parseInfo(await this.send(["LOCK.INFO", name], name, COMMAND_TIMEOUT_MS, "info"));
  }

  /**
   * Runs `command` if `fence` is at least the gate's highest (LOCK.FENCE). Its reply, or its
   * error, is the client library's own; StaleFenceError if a newer fence passed the gate.
   */
  async fenced(gate, fence, ...command) {
    checkName(gate, "gate");
    const value = fenceArg(fence);
    if (command.length === 0) throw new TypeError("fenced() needs a command");
    try {
      return await this.send(["LOCK.FENCE", gate, value, ...command], gate, COMMAND_TIMEOUT_MS, "fence", { raw: true, resend: false });
    } catch (err) {
      throw translateGuarded(err, gate, "fence", "LOCK.FENCE");
    }
  }

  /**
   * A candidate of the election `name` (see election.js): `leaseMs` (default 10000), `data` (a
   * string or Buffer of 1 to 4096 bytes, shown to observers), `onLost(err, election)`, `replicas`,
   * `replicasTimeoutMs`.
   */
  election(name, opts = {}) {
    return new Election(this, name, opts, ELECTION_TOOLS);
  }

  /** True if the server knows `command` (sent with no arguments: an arity error means yes). */
  async supports(command) {
    try {
      await this.send([command], undefined, COMMAND_TIMEOUT_MS, "supports");
      return true;
    } catch (err) {
      if (err instanceof LockTimeoutError) throw err;
      return !isUnsupported(err);
    }
  }

  /** Ends the waits in progress (they reject with LockError) and closes the locker's connections (not the client it was given). */
  async quit() {
    this.closed = true;
    for (const stop of [...this.waits]) stop(new LockError("the locker was closed (quit) during the wait"), false);
    await this.conns.close();
  }
}

/** What election.js uses of this module. */
const ELECTION_TOOLS = {
  now,
  pause,
  within,
  isReply,
  isUnsupported,
  abortReason,
  checkName,
  positiveMs,
  shown,
  LockTimeoutError,
  COMMAND_TIMEOUT_MS,
  WAIT_GRACE_MS,
};

/** What multi.js uses of this module, and its hold class (a Hold over several keys). */
const MULTI_TOOLS = {
  ...ELECTION_TOOLS,
  Hold,
  clock,
  str,
  errorText,
  translate,
  keySlot,
  modeArgs,
  newToken,
};
const MultiHold = multi.makeMultiHold(MULTI_TOOLS);

module.exports = {
  version,
  Locker,
  Hold,
  MultiHold,
  Election,
  LockError,
  LockBusyError,
  LockLostError,
  LockTimeoutError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
  NotReplicatedError,
  CrossSlotError,
};

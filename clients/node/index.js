// Locks for the redislock Redis module, for ioredis and node-redis (see index.d.ts and
// docs/clients.md). Replies are read as strings and Buffers on the library's own connections,
// never as JavaScript numbers, so fences stay exact past 2^53.
"use strict";

const crypto = require("node:crypto");

class LockError extends Error {
  constructor(message, name) {
    super(message);
    this.name = this.constructor.name;
    this.lockName = name;
  }
}

/** The lock was not granted (held by another token, or the wait ran out). */
class LockBusyError extends LockError {}

/** The hold is gone: its lease ran out, or it was released or deleted by someone else. */
class LockLostError extends LockError {}

/** The server's redislock does not know this command or option (yet). */
class UnsupportedError extends LockError {}

/**
 * The request does not fit the key: it is a semaphore with another `limit` (`limit` is then the
 * key's), `limit` was asked of a read/write lock (exclusive or shared holds), or the token already
 * holds the key in the other mode (`otherMode`). Nothing was changed.
 */
class LockKindError extends LockError {
  constructor(message, name, limit, otherMode) {
    super(message, name);
    this.limit = limit;
    this.otherMode = otherMode;
  }
}

/** LOCK.FENCE refused the command: a newer fence has already passed the gate. */
class StaleFenceError extends LockError {
  constructor(message, name, fence, highest) {
    super(message, name);
    this.fence = fence;
    this.highest = highest;
  }
}

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

/** A server error as the library's error, where it has one. */
function translate(err, name, what) {
  const text = errorText(err);
  if (isUnsupported(err)) return new UnsupportedError(`${what} is not supported by this server: ${text}`, name);
  const kind = text.match(KIND_MISMATCH);
  if (kind) return new LockKindError(text, name, kind[1] === undefined ? undefined : Number(kind[1]), kind[2] !== undefined);
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
  return err;
}

const str = (v) => (Buffer.isBuffer(v) ? v.toString() : v == null ? v : String(v));

// --- drivers: one per client library -------------------------------------------------------------
//
// A driver sends one command and answers with bulk strings as Buffers and integers as strings.
// `blocking()` lends a connection of its own for a command that waits in the server.

class IoredisDriver {
  constructor(client) {
    this.client = client;
    this.main = client.duplicate({ stringNumbers: true, lazyConnect: false });
    this.idle = [];
    this.all = [this.main];
  }

  call(args, conn = this.main) {
    return conn.callBuffer(String(args[0]), ...args.slice(1));
  }

  async blocking() {
    let conn = this.idle.pop();
    if (!conn) {
      conn = this.client.duplicate({ stringNumbers: true, lazyConnect: false });
      this.all.push(conn);
    }
    return {
      call: (args) => this.call(args, conn),
      done: (healthy) => {
        if (healthy) this.idle.push(conn);
        else {
          this.all = this.all.filter((c) => c !== conn);
          conn.disconnect();
        }
      },
    };
  }

  async close() {
    await Promise.all(this.all.map((c) => c.quit().catch(() => c.disconnect())));
    this.all = [];
    this.idle = [];
  }
}

class NodeRedisDriver {
  constructor(client) {
    this.client = client;
    this.idle = [];
    this.all = [];
    // RESP type codes (the protocol's own first bytes): ':' integer, '$' bulk string, '+' simple
    // string, '%' map. Integers as strings, strings as Buffers, maps as flat arrays.
    this.options = { typeMapping: { 58: String, 36: Buffer, 43: Buffer, 37: Array } };
  }

  call(args, conn = this.client) {
    return conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))), this.options);
  }

  async blocking() {
    let conn = this.idle.pop();
    if (!conn) {
      conn = this.client.duplicate();
      conn.on("error", () => {}); // a broken spare connection is dropped, not fatal
      await conn.connect();
      this.all.push(conn);
    }
    return {
      call: (args) => this.call(args, conn),
      done: (healthy) => {
        if (healthy) this.idle.push(conn);
        else {
          this.all = this.all.filter((c) => c !== conn);
          conn.destroy ? conn.destroy() : conn.disconnect();
        }
      },
    };
  }

  async close() {
    await Promise.all(this.all.map((c) => (c.close ? c.close() : c.quit()).catch(() => {})));
    this.all = [];
    this.idle = [];
  }
}

function driverFor(client) {
  if (client && typeof client.callBuffer === "function" && typeof client.duplicate === "function") {
    return new IoredisDriver(client);
  }
  if (client && typeof client.sendCommand === "function" && typeof client.duplicate === "function") {
    return new NodeRedisDriver(client);
  }
  throw new TypeError("redislock needs an ioredis client or a node-redis (v5+) client");
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

function positiveMs(value, what) {
  if (!Number.isInteger(value) || value <= 0) throw new RangeError(`${what} must be a positive integer of milliseconds, not ${value}`);
  return value;
}

/** The most places a semaphore (`limit`) may have. */
const MAX_LIMIT = 1000000;

function modeArgs(opts) {
  const args = [];
  if (opts.shared && opts.limit !== undefined) throw new RangeError("shared and limit exclude each other");
  if (opts.shared) args.push("SHARED");
  if (opts.limit !== undefined) {
    if (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_LIMIT) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${opts.limit}`);
    }
    args.push("LIMIT", opts.limit);
  }
  if (opts.ephemeral) args.push("EPHEMERAL");
  return args;
}

// --- holds -------------------------------------------------------------------------------------------

class Hold {
  constructor(locker, name, token, fence, ttlMs, grantedAt) {
    this.locker = locker;
    this.name = name;
    this.token = token;
    this.fence = fence;
    this.ttl = ttlMs;
    /** Local estimate of the lease's end, in ms since the epoch (as npm redlock's `expiration`). */
    this.expiration = grantedAt + ttlMs;
    this.released = false;
  }

  /** Resets the lease to `ttlMs` (default: the acquire's TTL) from now; LockLostError if gone. */
  async extend(ttlMs = this.ttl) {
    positiveMs(ttlMs, "ttlMs");
    if (this.released) throw new LockLostError(`cannot extend ${this.name}: it was released`, this.name);
    const sent = Date.now();
    let reply;
    try {
      reply = await this.locker.driver.call(["LOCK.EXTEND", this.name, this.token, "PX", ttlMs]);
    } catch (err) {
      throw translate(err, this.name, "extend");
    }
    if (str(reply) !== "1") throw new LockLostError(`cannot extend ${this.name}: the lock is no longer held by this token`, this.name);
    this.ttl = ttlMs;
    this.expiration = sent + ttlMs;
    return this;
  }

  /** Gives the lock back: true if it was still held, false if it had already been lost. */
  async release() {
    if (this.released) return false;
    this.released = true;
    let reply;
    try {
      reply = await this.locker.driver.call(["LOCK.RELEASE", this.name, this.token]);
    } catch (err) {
      this.released = false;
      throw translate(err, this.name, "release");
    }
    return str(reply) === "1";
  }

  /** True if the key still has this hold: its token among the holders, with this grant's fence. */
  async owned() {
    if (this.released) return false;
    const info = await this.locker.info(this.name);
    if (!info) return false;
    const holders = info.holders || (info.token === undefined ? [] : [info]);
    return holders.some((h) => h.token === this.token && h.fence === this.fence);
  }

  /** Runs `command` atomically if this hold is still the lock's (LOCK.CALL). */
  async call(...command) {
    if (command.length === 0) throw new TypeError("call() needs a command");
    try {
      return await this.locker.driver.call(["LOCK.CALL", this.name, this.token, ...command]);
    } catch (err) {
      throw translate(err, this.name, "call");
    }
  }
}

// --- the locker ----------------------------------------------------------------------------------------

class Locker {
  /**
   * @param client an ioredis client (Redis) or a connected node-redis client
   */
  constructor(client) {
    this.driver = driverFor(client);
  }

  /** Takes the lock `name` for `ttlMs`; LockBusyError if it is not granted (within `wait`). */
  async acquire(name, ttlMs, opts = {}) {
    const hold = await this.tryAcquire(name, ttlMs, opts);
    if (!hold) {
      throw new LockBusyError(
        opts.wait ? `${name} was not granted within ${opts.wait} ms` : `${name} is held by another token`,
        name,
      );
    }
    return hold;
  }

  /** As acquire(), but resolves to null when the lock is not granted. */
  async tryAcquire(name, ttlMs, opts = {}) {
    positiveMs(ttlMs, "ttlMs");
    const token = opts.token === undefined ? newToken() : String(opts.token);
    const args = ["LOCK.ACQUIRE", name, token, "PX", ttlMs, ...modeArgs(opts)];
    const wait = opts.wait === undefined ? 0 : opts.wait;
    if (wait === Infinity) args.push("BLOCK", 0);
    else if (wait > 0) args.push("BLOCK", Math.ceil(wait));
    else if (!(wait === 0)) throw new RangeError(`wait must be a number of milliseconds, not ${wait}`);
    const started = Date.now();
    let reply;
    if (wait === 0) {
      try {
        reply = await this.driver.call(args);
      } catch (err) {
        throw translate(err, name, "acquire");
      }
    } else {
      // Waiting in the server holds a connection: never the one other commands go through.
      const conn = await this.driver.blocking();
      let healthy = false;
      try {
        reply = await conn.call(args);
        healthy = true;
      } catch (err) {
        healthy = !/connection|closed|ECONN|socket/i.test(errorText(err));
        throw translate(err, name, "acquire");
      } finally {
        conn.done(healthy);
      }
    }
    const grant = parseGrant(reply, name);
    if (!grant) return null;
    return new Hold(this, name, grant.token, grant.fence, ttlMs, started);
  }

  /**
   * Runs `routine(signal, hold)` while holding `name`: the lease is renewed every third of
   * `ttlMs`, `signal` is aborted (its reason a LockLostError) the moment a renewal finds the
   * hold gone, and the lock is released when the routine settles.
   */
  async using(name, ttlMs, optsOrRoutine, maybeRoutine) {
    const opts = typeof optsOrRoutine === "function" ? {} : optsOrRoutine || {};
    const routine = typeof optsOrRoutine === "function" ? optsOrRoutine : maybeRoutine;
    if (typeof routine !== "function") throw new TypeError("using() needs a routine");
    const hold = await this.acquire(name, ttlMs, opts);
    const controller = new AbortController();
    let timer = null;
    let stopped = false;
    let renewing = null;
    const schedule = () => {
      if (stopped) return;
      timer = setTimeout(() => {
        renewing = renew().finally(() => {
          renewing = null;
        });
      }, Math.max(1, Math.floor(ttlMs / 3)));
    };
    const renew = async () => {
      try {
        await hold.extend(ttlMs);
      } catch (err) {
        if (err instanceof LockLostError) {
          if (!stopped) controller.abort(err);
          return;
        }
        // Not reachable: keep trying while the lease may still run.
        if (Date.now() >= hold.expiration) {
          if (!stopped) controller.abort(new LockLostError(`${name}: no renewal reached the server before the lease ended (${errorText(err)})`, name));
          return;
        }
      }
      schedule();
    };
    schedule();
    try {
      return await routine(controller.signal, hold);
    } finally {
      stopped = true;
      clearTimeout(timer);
      if (renewing) await renewing;
      await hold.release().catch(() => {}); // false, harmlessly, if the hold was lost
    }
  }

  /**
   * LOCK.INFO, or null when nobody holds it: { mode, ttl, waiters, holders: [{ token, fence
   * (bigint), ttl, client }] }, plus token, fence and client for an exclusive lock and limit for
   * a semaphore.
   */
  async info(name) {
    return parseInfo(await this.driver.call(["LOCK.INFO", name]));
  }

  /** Runs `command` if `fence` is at least the gate's highest (LOCK.FENCE). */
  async fenced(gate, fence, ...command) {
    if (command.length === 0) throw new TypeError("fenced() needs a command");
    try {
      return await this.driver.call(["LOCK.FENCE", gate, BigInt(fence).toString(), ...command]);
    } catch (err) {
      throw translate(err, gate, "fence");
    }
  }

  /** True if the server knows `command` (sent with no arguments: an arity error means yes). */
  async supports(command) {
    try {
      await this.driver.call([command]);
      return true;
    } catch (err) {
      return !isUnsupported(err);
    }
  }

  /** Closes the connections the locker opened (not the client it was given). */
  async quit() {
    await this.driver.close();
  }
}

module.exports = {
  Locker,
  Hold,
  LockError,
  LockBusyError,
  LockLostError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
};

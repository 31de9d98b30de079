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

// --- bounded calls -------------------------------------------------------------------------------
//
// The client libraries queue a command while their connection is down and retry or re-send it
// (ioredis re-sends a command in flight when it reconnects); none of that may outlive a lease or
// a wait. Every command of the locker is therefore raced against a timer: past its bound it
// rejects with LockTimeoutError, whatever the library does with it afterwards.

/** The lock's moments: a monotonic clock in ms (performance.now()), immune to wall-clock steps. */
const now = () => performance.now();

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

/** No answer within the time the call could take: the network or the server is not answering. */
class LockTimeoutError extends LockError {}

/** Resolves or rejects as `promise`, or rejects with `onTimeout()` after `ms` (Infinity: never). */
function within(promise, ms, onTimeout) {
  promise.catch(() => {}); // a late failure after the timer won is not unhandled
  if (!Number.isFinite(ms)) return promise;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), Math.max(0, ms));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// How each library says a command's connection went away (ioredis, with maxRetriesPerRequest 0:
// "Reached the max retries per request limit"; node-redis: SocketClosedUnexpectedlyError).
const CONNECTION_LOST = /connection|closed|ECONN|socket|EPIPE|stream|max retries per request/i;

// --- drivers: one per client library -------------------------------------------------------------
//
// A driver sends one command and answers with bulk strings as Buffers and integers as strings.
// Every command goes through connections of the locker's own, never the application's: a
// blocking call in the application (BLPOP, a slow script) must not hold up a renewal.
// `blocking()` lends a connection of its own for a command that waits in the server.

const quiet = () => {}; // connection errors surface as rejected commands, not as 'error' events

class IoredisDriver {
  constructor(client) {
    this.client = client;
    this.main = this.open({});
    this.idle = [];
    this.all = [this.main];
  }

  // A wait must not be re-sent behind the caller's back when its connection drops (ioredis
  // would send it again, whole, on the next connection): it fails, and the locker decides.
  open(extra) {
    const conn = this.client.duplicate({ stringNumbers: true, lazyConnect: false, ...extra });
    if (typeof conn.on === "function") conn.on("error", quiet);
    return conn;
  }

  call(args, conn = this.main) {
    return conn.callBuffer(String(args[0]), ...args.slice(1));
  }

  async blocking() {
    let conn = this.idle.pop();
    if (!conn) {
      conn = this.open({ autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, enableOfflineQueue: true });
      this.all.push(conn);
    }
    return this.lend(conn);
  }

  lend(conn) {
    return {
      call: (args) => this.call(args, conn),
      drop: () => this.drop(conn),
      done: (healthy) => (healthy ? this.idle.push(conn) : this.drop(conn)),
    };
  }

  drop(conn) {
    this.all = this.all.filter((c) => c !== conn);
    this.idle = this.idle.filter((c) => c !== conn);
    conn.disconnect();
  }

  async close() {
    const all = this.all;
    this.all = [];
    this.idle = [];
    await Promise.all(all.map((c) => within(c.quit(), 1000, () => new Error("quit")).catch(() => c.disconnect())));
  }
}

class NodeRedisDriver {
  constructor(client) {
    this.client = client;
    this.idle = [];
    this.all = [];
    // Connected at once, as ioredis's duplicates are: a renewal must not wait for a handshake.
    this.main = null;
    this.connectMain();
    // RESP type codes (the protocol's own first bytes): ':' integer, '$' bulk string, '+' simple
    // string, '%' map. Integers as strings, strings as Buffers, maps as flat arrays.
    this.options = { typeMapping: { 58: String, 36: Buffer, 43: Buffer, 37: Array } };
  }

  async open() {
    const conn = this.client.duplicate();
    conn.on("error", quiet);
    this.all.push(conn);
    await conn.connect();
    return conn;
  }

  connectMain() {
    const main = this.open();
    main.catch(() => {
      if (this.main === main) this.main = null; // not reachable now: open again when needed
    });
    this.main = main;
    return main;
  }

  async call(args, conn) {
    if (!conn) conn = await (this.main || this.connectMain());
    return conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))), this.options);
  }

  async blocking() {
    const conn = this.idle.pop() || (await this.open());
    return {
      call: (args) => this.call(args, conn),
      drop: () => this.drop(conn),
      done: (healthy) => (healthy ? this.idle.push(conn) : this.drop(conn)),
    };
  }

  drop(conn) {
    this.all = this.all.filter((c) => c !== conn);
    this.idle = this.idle.filter((c) => c !== conn);
    try {
      conn.destroy ? conn.destroy() : conn.disconnect();
    } catch {
      // already closed
    }
  }

  async close() {
    const all = this.all;
    this.all = [];
    this.idle = [];
    this.main = null;
    await Promise.all(
      all.map((c) =>
        within(Promise.resolve().then(() => (c.close ? c.close() : c.quit())), 1000, () => new Error("quit")).catch(() => this.drop(c)),
      ),
    );
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
  constructor(locker, name, token, fence, ttlMs, sent) {
    this.locker = locker;
    this.name = name;
    this.token = token;
    this.fence = fence;
    this.ttl = ttlMs;
    this.released = false;
    this.setLease(sent, ttlMs);
  }

  /** The lease clock: a lease of `ttlMs` set by a request sent at `sent` (now()) ends no earlier. */
  setLease(sent, ttlMs) {
    this.leaseSent = sent;
    this.leaseEnd = leaseEnd(sent, ttlMs);
    /** The lease's conservative local end, in ms since the epoch (as npm redlock's `expiration`). */
    this.expiration = Date.now() + (this.leaseEnd - now());
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
    let reply;
    try {
      reply = await this.locker.send(["LOCK.EXTEND", this.name, this.token, "PX", ttlMs], timeoutMs, "extend", this.name);
    } catch (err) {
      throw translate(err, this.name, "extend");
    }
    if (str(reply) !== "1") throw new LockLostError(`cannot extend ${this.name}: the lock is no longer held by this token`, this.name);
    this.ttl = ttlMs;
    this.setLease(sent, ttlMs);
    return this;
  }

  /**
   * Gives the lock back: true if it was still held, false if it had already been lost. Within the
   * lease time left (at least 1 s): then LockTimeoutError, and the hold can be released again.
   */
  async release() {
    if (this.released) return false;
    this.released = true;
    let reply;
    try {
      reply = await this.locker.send(["LOCK.RELEASE", this.name, this.token], Math.max(this.leaseLeft, 1000), "release", this.name);
    } catch (err) {
      this.released = false;
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

  /** Runs `command` atomically if this hold is still the lock's (LOCK.CALL). */
  async call(...command) {
    if (command.length === 0) throw new TypeError("call() needs a command");
    try {
      return await this.locker.send(["LOCK.CALL", this.name, this.token, ...command], COMMAND_TIMEOUT_MS, "call", this.name);
    } catch (err) {
      throw translate(err, this.name, "call");
    }
  }
}

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new LockError("aborted");
}

// --- the locker ----------------------------------------------------------------------------------------

class Locker {
  /**
   * @param client an ioredis client (Redis) or a connected node-redis client
   */
  constructor(client) {
    this.driver = driverFor(client);
    /** Waits in progress, each with the function that ends it (quit() ends them all). */
    this.waits = new Set();
    this.closed = false;
  }

  /** One command on the locker's own connection, rejected with LockTimeoutError after `ms`. */
  send(args, ms, what, name) {
    return within(this.driver.call(args), ms, () => new LockTimeoutError(`${what} of ${name}: no answer within ${Math.round(ms)} ms`, name));
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

  /**
   * As acquire(), but resolves to null when the lock is not granted. `signal` (an AbortSignal)
   * ends a wait: its connection is closed, which takes the waiter out of the server's queue, and
   * the call rejects with the signal's reason. A wait whose connection drops is sent again once,
   * with the time left; it never outlives `wait` by more than the network's round trip.
   */
  async tryAcquire(name, ttlMs, opts = {}) {
    positiveMs(ttlMs, "ttlMs");
    if (this.closed) throw new LockError("the locker was closed (quit)", name);
    const signal = opts.signal;
    if (signal && signal.aborted) throw abortReason(signal);
    const token = opts.token === undefined ? newToken() : String(opts.token);
    const args = ["LOCK.ACQUIRE", name, token, "PX", ttlMs, ...modeArgs(opts)];
    const wait = opts.wait === undefined ? 0 : opts.wait;
    if (!(wait === 0 || wait === Infinity || (typeof wait === "number" && wait > 0))) {
      throw new RangeError(`wait must be a number of milliseconds, not ${wait}`);
    }
    let sent = now();
    let reply;
    if (wait === 0) {
      try {
        reply = await this.send(args, COMMAND_TIMEOUT_MS, "acquire", name);
      } catch (err) {
        throw translate(err, name, "acquire");
      }
    } else {
      reply = await this.waitFor(name, args, wait, signal);
    }
    let grant = parseGrant(reply, name);
    if (!grant) return null;
    if (wait !== 0 && now() - sent > ttlMs / 10) {
      // Granted after a wait: the lease began at the grant, some time after the request was
      // sent; renew now so that the lease clock counts from a known moment.
      const renewSent = now();
      const renewed = await this.send(["LOCK.EXTEND", name, grant.token, "PX", ttlMs], ttlMs, "extend", name).catch(() => null);
      if (renewed !== null && str(renewed) === "1") sent = renewSent;
      else if (renewed !== null) return null; // gone already: a lease shorter than the round trip
    }
    return new Hold(this, name, grant.token, grant.fence, ttlMs, sent);
  }

  // A wait in the server, on a connection of its own (never the one other commands go through).
  async waitFor(name, args, wait, signal) {
    const deadline = wait === Infinity ? Infinity : now() + wait;
    let requeued = false;
    for (;;) {
      const left = deadline === Infinity ? 0 : Math.ceil(deadline - now());
      if (deadline !== Infinity && left <= 0) return null;
      const conn = await within(this.driver.blocking(), deadline + WAIT_GRACE_MS - now(), () => new LockTimeoutError(`${name}: no connection for the wait within ${wait} ms`, name));
      let end;
      const ended = new Promise((_, reject) => {
        end = reject;
      });
      ended.catch(() => {});
      const stop = (reason) => {
        conn.drop(); // closing the connection takes the waiter out of the queue at once
        end(reason);
      };
      const onAbort = () => stop(abortReason(signal));
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      this.waits.add(stop);
      let healthy = false;
      try {
        const answer = conn.call([...args, "BLOCK", left]);
        const bound = deadline === Infinity ? Infinity : deadline + WAIT_GRACE_MS - now();
        const reply = await within(Promise.race([answer, ended]), bound, () => {
          conn.drop();
          return new LockTimeoutError(`${name}: no answer to the wait within ${wait} ms`, name);
        });
        healthy = true;
        return reply;
      } catch (err) {
        if (err instanceof LockError || (signal && signal.aborted) || this.closed) throw err;
        if (CONNECTION_LOST.test(errorText(err))) {
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
        conn.done(healthy);
      }
    }
  }

  /**
   * Runs `routine(signal, hold)` while holding `name`: the lease is renewed every third of
   * `ttlMs`, and `signal` is aborted (its reason a LockLostError) when a renewal finds the hold
   * gone, or when the lease's conservative local end comes with no renewal answered: before the
   * server can grant the lock to anyone else, whether or not the network answers. The lock is
   * released when the routine settles (within the lease time left, at least 1 s).
   */
  async using(name, ttlMs, optsOrRoutine, maybeRoutine) {
    const opts = typeof optsOrRoutine === "function" ? {} : optsOrRoutine || {};
    const routine = typeof optsOrRoutine === "function" ? optsOrRoutine : maybeRoutine;
    if (typeof routine !== "function") throw new TypeError("using() needs a routine");
    const hold = await this.acquire(name, ttlMs, opts);
    const controller = new AbortController();
    let stopped = false;
    let renewTimer = null;
    let lossTimer = null;
    const lose = (err) => {
      if (stopped || controller.signal.aborted) return;
      clearTimeout(renewTimer);
      clearTimeout(lossTimer);
      controller.abort(err);
    };
    // The lease clock: at the lease's end, unless a renewal moved it.
    const watchLease = () => {
      clearTimeout(lossTimer);
      lossTimer = setTimeout(() => {
        if (hold.leaseLeft > 0) return watchLease();
        lose(new LockLostError(`${name}: no renewal was answered before the lease ran out`, name));
      }, Math.max(0, hold.leaseLeft));
    };
    const renew = async () => {
      if (stopped) return;
      try {
        await hold.extend(ttlMs, hold.leaseLeft);
        if (stopped) return;
        watchLease();
        schedule(hold.leaseSent + ttlMs / 3 - now()); // a third after the request: RTT included
      } catch (err) {
        if (err instanceof LockLostError) return lose(err);
        // Not answered or not reachable: again soon, while the lease may still run.
        if (hold.leaseLeft > 0) schedule(Math.min(Math.max(ttlMs / 20, 10), 250));
      }
    };
    const schedule = (ms) => {
      if (stopped) return;
      renewTimer = setTimeout(renew, Math.max(1, Math.floor(ms)));
    };
    watchLease();
    schedule(hold.leaseSent + ttlMs / 3 - now());
    try {
      return await routine(controller.signal, hold);
    } finally {
      stopped = true;
      clearTimeout(renewTimer);
      clearTimeout(lossTimer);
      await hold.release().catch(() => {}); // false, harmlessly, if the hold was lost
    }
  }

  /**
   * LOCK.INFO, or null when nobody holds it: { mode, ttl, waiters, holders: [{ token, fence
   * (bigint), ttl, client }] }, plus token, fence and client for an exclusive lock and limit for
   * a semaphore.
   */
  async info(name) {
    return parseInfo(await this.send(["LOCK.INFO", name], COMMAND_TIMEOUT_MS, "info", name));
  }

  /** Runs `command` if `fence` is at least the gate's highest (LOCK.FENCE). */
  async fenced(gate, fence, ...command) {
    if (command.length === 0) throw new TypeError("fenced() needs a command");
    try {
      return await this.send(["LOCK.FENCE", gate, BigInt(fence).toString(), ...command], COMMAND_TIMEOUT_MS, "fence", gate);
    } catch (err) {
      throw translate(err, gate, "fence");
    }
  }

  /** True if the server knows `command` (sent with no arguments: an arity error means yes). */
  async supports(command) {
    try {
      await this.send([command], COMMAND_TIMEOUT_MS, "supports", command);
      return true;
    } catch (err) {
      if (err instanceof LockTimeoutError) throw err;
      return !isUnsupported(err);
    }
  }

  /** Ends the waits in progress (they reject with LockError) and closes the locker's connections (not the client it was given). */
  async quit() {
    this.closed = true;
    for (const stop of [...this.waits]) stop(new LockError("the locker was closed (quit) during the wait"));
    await this.driver.close();
  }
}

module.exports = {
  Locker,
  Hold,
  LockError,
  LockBusyError,
  LockLostError,
  LockTimeoutError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
};

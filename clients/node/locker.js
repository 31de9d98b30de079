// The locker: the package's entry point on a client of the application (see index.d.ts).
"use strict";

const { LockError, LockBusyError, LockTimeoutError } = require("./errors");
const { Election } = require("./election");
const multi = require("./multi");
const { COMMAND_TIMEOUT_MS } = require("./clock");
const { checkName, fenceArg, shown } = require("./args");
const { isUnsupported, translateGuarded, parseInfo } = require("./replies");
const { Connections } = require("./connections");
const { connectorFor } = require("./drivers");
const { tryAcquire, waitFor, request } = require("./acquire");
const { ELECTION_TOOLS } = require("./tools");

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
   * As acquire(), but resolves to null when the lock is not granted (see acquire.js).
   * `autoRenew`: the hold is renewed every third of `ttlMs` until it is released or lost, as
   * using() renews it.
   */
  async tryAcquire(name, ttlMs, opts, extra) {
    const autoRenew = opts && opts.autoRenew;
    if (autoRenew !== undefined && typeof autoRenew !== "boolean") throw new TypeError(`autoRenew must be a boolean, not ${shown(autoRenew)}`);
    const hold = await tryAcquire(this, name, ttlMs, opts, extra);
    if (hold && autoRenew) hold.renewEvery(ttlMs);
    return hold;
  }

  // A request for a grant, bound to a connection of its own with `ephemeral` (see acquire.js); multi.js asks through it.
  request(key, args, opts, translate) {
    return request(this, key, args, opts, translate);
  }

  // A wait in the server (see acquire.js); election.js and multi.js wait through it.
  waitFor(name, args, wait, signal, follow, keep, giveBack) {
    return waitFor(this, name, args, wait, signal, follow, keep, giveBack);
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
   * Whether anyone holds the lock `name`, or any of the keys `names` (LOCK.INFO of each); a key
   * holding another type (a plain string) counts as held, as Python's locked() counts it.
   */
  async locked(name) {
    for (const key of Array.isArray(name) ? name : [name]) {
      try {
        if ((await this.info(key)) !== null) return true;
      } catch (err) {
        if (/^WRONGTYPE/.test(String(err && err.message))) return true;
        throw err;
      }
    }
    return false;
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

module.exports = { Locker };

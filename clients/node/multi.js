// Locks on several resources at once: locker.acquire([names], ttlMs, opts), tryAcquire([names], …)
// and using([names], …) (see index.d.ts and docs/clients.md). Every key is granted to one token in
// one atomic step (LOCK.ACQUIREALL), or none is; waiting is in the server, first come first served
// on each key. The hold (`MultiHold`) is a `Hold` of hold.js over the whole set: one token, one
// fence per key, one lease clock. Its renewal extends each key in turn (one LOCK.EXTEND per key,
// on the locker's own connections, with WAIT after each for `replicas`); the lease clock moves only
// when every key's extension was answered 1 (and acknowledged), and a key found gone signals the
// whole set lost. Not a transaction: an extension of one key does not depend on another's, and a
// renewal that went through in part simply counts as none. release() is LOCK.RELEASEALL.
"use strict";

const { LockError, LockBusyError, LockLostError, LockTimeoutError, CrossSlotError } = require("./errors");
const durable = require("./durable");

/** The most keys one request may name (the server's bound). */
const MAX_KEYS = 64;

/** A set's name in errors and messages. */
const label = (names) => `[${names.map(String).join(", ")}]`;

/** 1 to 64 distinct names, each a string or a Buffer; on a Cluster all in one slot. */
function checkNames(names, tools, cluster) {
  if (!Array.isArray(names)) throw new TypeError("names must be an array of key names");
  if (names.length < 1 || names.length > MAX_KEYS) throw new RangeError(`a multi-resource lock takes 1 to ${MAX_KEYS} names, not ${names.length}`);
  const seen = new Set();
  for (const name of names) {
    tools.checkName(name);
    const key = String(name);
    if (seen.has(key)) throw new RangeError(`${JSON.stringify(key)} is named twice`);
    seen.add(key);
  }
  if (cluster) {
    const slots = new Set(names.map((n) => tools.keySlot(n)));
    if (slots.size > 1) {
      throw new CrossSlotError(
        `the keys of a multi-resource lock must be in one Cluster slot, these are in ${slots.size}: ${label(names)} (give them one hash tag, as {tag}:name)`,
        label(names),
      );
    }
  }
  return names;
}

/** A server error to a multi-key command: CROSSSLOT as CrossSlotError, else as for one key. */
function errorOf(err, names, what, tools) {
  const text = tools.errorText(err);
  if (text.startsWith("CROSSSLOT")) return Object.assign(new CrossSlotError(`${label(names)}: ${text}`, label(names)), { cause: err });
  return tools.translate(err, label(names), what);
}

function parseGrants(reply, names) {
  if (reply == null) return null;
  if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1]) || reply[1].length !== names.length) {
    throw new LockError(`unexpected LOCK.ACQUIREALL reply: ${reply}`, label(names));
  }
  const str = (v) => (Buffer.isBuffer(v) ? v.toString() : String(v));
  return { token: str(reply[0]), fences: reply[1].map((f) => BigInt(str(f))) };
}

/** The multi-resource hold class, made on hold.js's Hold (tools.js calls this once). */
function makeMultiHold(tools) {
  const { Hold, now, str, positiveMs, translate } = tools;

  class MultiHold extends Hold {
    constructor(locker, names, token, fences, ttlMs, sent, onLost, durability, bound = null) {
      super(locker, label(names), token, fences[0], ttlMs, sent, onLost, durability, bound);
      /** The keys, in the order given (node-redlock's name for them). */
      this.resources = [...names];
      /** One fence per key, in the order of `resources`. */
      this.fences = fences;
    }

    /** The fence of each key, by name as given (a Map, in the order of `resources`). */
    get fencesByName() {
      return new Map(this.resources.map((name, i) => [name, this.fences[i]]));
    }

    /** LOCK.INFO of each key, in the order of `resources` (null for a key that holds no lock). */
    async info() {
      const found = [];
      for (const name of this.resources) found.push(await this.locker.info(name));
      return found;
    }

    /** The fence of one of the keys. */
    fenceOf(name) {
      const i = this.resources.findIndex((n) => String(n) === String(name));
      if (i < 0) throw new RangeError(`${String(name)} is not one of ${this.name}`);
      return this.fences[i];
    }

    /**
     * Resets every key's lease to `ttlMs` (one LOCK.EXTEND per key, in turn); LockLostError (the
     * set signalled lost) if any key is gone; LockTimeoutError if the keys were not all answered
     * within `timeoutMs`: the lease clock then stays where it was.
     */
    async extend(ttlMs = this.ttl, timeoutMs = Math.max(this.leaseLeft, 1000)) {
      positiveMs(ttlMs, "ttlMs");
      if (this.released) throw new LockLostError(`cannot extend ${this.name}: it was released`, this.name);
      const sent = now();
      const deadline = sent + timeoutMs;
      const d = this.durability;
      for (const key of this.resources) {
        const left = deadline - now();
        if (left <= 0) throw new LockTimeoutError(`extend of ${this.name}: not every key was answered within ${Math.round(timeoutMs)} ms`, this.name);
        let reply;
        try {
          const follow = d && durable.follow(d, Math.min(ttlMs, left));
          reply = await this.channel.send(["LOCK.EXTEND", key, this.token, "PX", ttlMs], key, left, "extend", { follow });
        } catch (err) {
          const e = translate(err, this.name, "extend");
          if (e instanceof LockLostError) this.lose(e);
          throw e;
        }
        if (str(d ? reply.reply : reply) !== "1") {
          const e = new LockLostError(`cannot extend ${this.name}: ${String(key)} is no longer held by this token`, this.name);
          this.lose(e);
          throw e;
        }
        if (d) {
          const acks = durable.acks(d, reply);
          if (!acks.ok) throw durable.shortfall(d, acks, this.name, "extension");
        }
      }
      if (this.signal.aborted) return this;
      this.ttl = ttlMs;
      this.setLease(sent, ttlMs);
      return this;
    }

    /**
     * Gives every key back (LOCK.RELEASEALL): true if every key was still held, false if any had
     * been lost (the others are released all the same). Within the lease time left (at least
     * 1 s): then LockTimeoutError, and the hold can be released again.
     */
    async release() {
      if (this.released) return false;
      this.released = true;
      const renewing = this.renewTtl;
      this.stopRenewing();
      tools.clock.cancel(this.lossEntry);
      this.lossEntry = null;
      const names = this.resources;
      let reply;
      try {
        reply = await this.channel.send(["LOCK.RELEASEALL", names.length, ...names, this.token], names[0], Math.max(this.leaseLeft, 1000), "release");
      } catch (err) {
        this.released = false;
        this.watch();
        if (renewing) this.renewEvery(renewing);
        throw errorOf(err, names, "release", tools);
      }
      this.leaseEnd = 0;
      if (this.bound) this.bound.close();
      return Number(str(reply)) === names.length;
    }

    /** True if every key still has this hold: the token among its holders, with this grant's fence. */
    async owned() {
      if (this.released || this.leaseLeft === 0) return false;
      for (let i = 0; i < this.resources.length; i++) {
        const info = await this.locker.info(this.resources[i]);
        const holders = !info ? [] : info.holders || (info.token === undefined ? [] : [info]);
        if (!holders.some((h) => h.token === this.token && h.fence === this.fences[i])) return false;
      }
      return true;
    }

    /** LOCK.CALL needs one key: guard the write with the single key's hold, or LOCK.FENCE with `fenceOf(name)`. */
    async call() {
      throw new TypeError(`call() is for a single-name hold; ${this.name} holds several keys (use fenced() with fenceOf(name))`);
    }
  }
  return MultiHold;
}

/** locker.tryAcquire([names], ttlMs, opts): the hold of every key, or null when not granted (within `wait`). */
async function tryAcquireAll(locker, names, ttlMs, opts, tools, MultiHold) {
  const { now, positiveMs, shown, modeArgs, newToken, COMMAND_TIMEOUT_MS } = tools;
  checkNames(names, tools, locker.conns.cluster);
  positiveMs(ttlMs, "ttlMs");
  if (opts === null || typeof opts !== "object") throw new TypeError(`the options must be an object, not ${shown(opts)}`);
  if (opts.limit !== undefined) throw new RangeError("limit (a semaphore) is for one key; a multi-resource lock is exclusive or shared");
  if (locker.closed) throw new LockError("the locker was closed (quit)", label(names));
  const signal = opts.signal;
  if (signal && signal.aborted) throw tools.abortReason(signal);
  if (opts.onLost !== undefined && typeof opts.onLost !== "function") throw new TypeError(`onLost must be a function, not ${shown(opts.onLost)}`);
  const wait = opts.wait === undefined ? 0 : opts.wait;
  if (!(wait === 0 || wait === Infinity || (typeof wait === "number" && wait > 0))) {
    throw new (typeof wait === "number" ? RangeError : TypeError)(`wait must be a number of milliseconds, not ${shown(wait)}`);
  }
  const key = names[0]; // every key is in one slot: the first routes the request
  const token = opts.token === undefined ? newToken() : String(opts.token);
  const args = ["LOCK.ACQUIREALL", names.length, ...names, token, "PX", ttlMs, ...modeArgs(opts)];
  const d = durable.durability(opts);
  if (d) await durable.check(d, label(names), locker.aofChecked, (a) => locker.send(a, key, COMMAND_TIMEOUT_MS, "check"));
  const follow = d && durable.follow(d, ttlMs);
  const unwrap = (r) => (follow && r ? r.reply : r);
  let sent = now();
  // With `ephemeral`, every key is bound to a connection opened for this hold (bound.js).
  let bound = null;
  const releaseAll = (t, ms) => (bound || locker).send(["LOCK.RELEASEALL", names.length, ...names, t], key, ms, "release");
  const giveBack = (late) => {
    const grant = parseGrants(late, names);
    return grant ? releaseAll(grant.token, 1000) : null;
  };
  const ephemeral = !!opts.ephemeral;
  let reply;
  try {
    ({ reply, bound } = await locker.request(key, args, { wait, signal, follow, ephemeral, giveBack }, (err) => err));
  } catch (err) {
    throw errorOf(err, names, "acquire", tools);
  }
  let hold = null;
  try {
    const grant = parseGrants(unwrap(reply), names);
    if (!grant) return null;
    if (d) await durable.confirm(d, label(names), reply, () => releaseAll(grant.token, Math.max(d.timeoutMs, 1000)));
    // onLost is set once the hold is handed out: a grant given back below is no loss to report.
    const made = new MultiHold(locker, names, grant.token, grant.fences, ttlMs, sent, null, d, bound);
    if (wait !== 0 && now() - sent > ttlMs / 10) {
      // Granted after a wait: the lease began at the grant, some time after the request was sent;
      // renew every key now so that the lease clock counts from a known moment.
      try {
        await made.extend(ttlMs, ttlMs);
      } catch (err) {
        if (err instanceof LockLostError) {
          await releaseAll(grant.token, 1000).catch(() => {});
          return null; // gone already: a lease shorter than the round trip
        }
        // not answered: the lease clock counts from the wait's request
      }
    }
    if (typeof opts.onLost === "function") made.onLost = opts.onLost;
    hold = made;
    return hold;
  } finally {
    if (bound && !hold) bound.close(); // not handed out: its connection is closed
  }
}

/** locker.acquire([names], …): as tryAcquireAll, LockBusyError when not granted. */
function busy(names, opts) {
  return new LockBusyError(
    opts.wait ? `${label(names)} was not granted within ${opts.wait} ms` : `${label(names)}: a key is held by another token`,
    label(names),
  );
}

module.exports = { MAX_KEYS, label, checkNames, parseGrants, makeMultiHold, tryAcquireAll, busy };

// A hold of a lock: its lease clock (signal, onLost, leaseLeft), extend(), renewal, release(),
// owned() and call() (LOCK.CALL), on the locker that took it. A hold bound to a connection
// (EPHEMERAL) is renewed and released on that connection (bound.js), and lost when it closes.
// Every way a hold ends goes through lose() (signalled, once) or release().
"use strict";

const { LockLostError } = require("./errors");
const durable = require("./durable");
const { now, clock, leaseEnd, COMMAND_TIMEOUT_MS } = require("./clock");
const { positiveMs } = require("./args");
const { translate, translateGuarded, str } = require("./replies");

/** How soon a renewal that was not answered is tried again (while the lease may still run). */
const retryRenewal = (ttlMs) => Math.min(Math.max(ttlMs / 20, 10), 250);

class Hold {
  constructor(locker, name, token, fence, ttlMs, sent, onLost, durability = null, bound = null) {
    this.locker = locker;
    /** The connection the hold is bound to (a Bound: EPHEMERAL), or null. */
    this.bound = bound;
    /** Where the hold's extensions and release go: its own connection, or the locker's. */
    this.channel = bound || locker;
    /** The acknowledgements each extension must get to count (`replicas`, `aof*`), or null. */
    this.durability = durability;
    this.name = name;
    this.token = token;
    this.fence = fence;
    this.ttl = ttlMs;
    /** The TTL the hold was acquired with: reacquire() resets the lease to it. */
    this.acquiredTtl = ttlMs;
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
    if (bound) {
      // The server released the hold when the connection closed: lost now, not at the next renewal.
      bound.onClose((why) => this.lose(new LockLostError(`${name}: the connection the hold is bound to closed (${why}); the server released it`, name)));
    }
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

  /**
   * Signals the loss once, whatever reports it first (a renewal, the lease clock, the bound
   * connection's close) and however many do: `signal` aborts with `err`, then `onLost(err, hold)`
   * runs. A bound connection is closed: whatever the server still has of the hold ends with it.
   */
  lose(err) {
    if (this.released || this.signal.aborted) return;
    this.stopRenewing();
    clock.cancel(this.lossEntry);
    this.lossEntry = null;
    if (this.bound) this.bound.close();
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
      reply = await this.channel.send(["LOCK.EXTEND", this.name, this.token, "PX", ttlMs], this.name, timeoutMs, "extend", { follow });
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

  /** Resets the lease to the TTL it was acquired with (Python's reacquire()): extend(acquired TTL). */
  reacquire() {
    return this.extend(this.acquiredTtl);
  }

  /** LOCK.INFO of the hold's key, or null when nobody holds it. */
  info() {
    return this.locker.info(this.name);
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
      reply = await this.channel.send(["LOCK.RELEASE", this.name, this.token], this.name, Math.max(this.leaseLeft, 1000), "release");
    } catch (err) {
      this.released = false;
      this.watch();
      if (renewing) this.renewEvery(renewing);
      throw translate(err, this.name, "release");
    }
    this.leaseEnd = 0;
    if (this.bound) this.bound.close();
    return str(reply) === "1";
  }

  /**
   * Ends the hold here without a release (one that got no answer): no more renewals, nothing
   * signalled; a bound connection is closed, which ends the hold in the server as well.
   */
  drop() {
    if (this.released) return;
    this.released = true;
    this.stopRenewing();
    clock.cancel(this.lossEntry);
    this.lossEntry = null;
    this.leaseEnd = 0;
    if (this.bound) this.bound.close();
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

module.exports = { Hold };

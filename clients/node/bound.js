// The connection a hold is bound to (EPHEMERAL: ephemeral locks, election terms, multi-key locks
// with `ephemeral`): opened by the locker for that hold alone, never one of the application's
// nor one other commands share. The grant, the renewals and the release go on it, and it is kept
// alive while the hold lives (a command at least every KEEPALIVE_MS: the server's `timeout` never
// closes it); it has none of the application's timeouts and no reconnection (drivers.js). Its
// close (CLIENT KILL, a restart, a reset) is reported as soon as the socket says so: the server
// has released the hold then, and the hold is signalled lost (hold.js). It is closed when the
// hold ends (released or lost): nothing of the hold keeps the process alive afterwards.
"use strict";

const { LockTimeoutError } = require("./errors");
const { now, clock, pause, within } = require("./clock");
const { followUp } = require("./connections");
const { errorText, isReply } = require("./replies");
const { redirection, RETRY_LATER, retryPause } = require("./cluster");

/**
 * The longest a bound connection stays silent (ms): the server's `timeout` is in whole seconds,
 * 1 at the least, and closes a connection only once it was idle for longer than that.
 */
const KEEPALIVE_MS = 1000;

/** When a bound connection last used at `lastUsed` must send something (a PING) to stay open. */
const keepAliveAt = (lastUsed) => lastUsed + KEEPALIVE_MS;

/** A Cluster answer that says the key is served elsewhere now, or not now. */
const elsewhere = (err) => isReply(err) && (redirection(err) !== null || RETRY_LATER.test(errorText(err)));

class Bound {
  /** `lent`: the connection (Connections.own()) that received the grant. */
  constructor(locker, lent) {
    this.locker = locker;
    this.lent = lent;
    /** Why it closed (a string), or null while open. */
    this.closed = null;
    this.listeners = [];
    this.lastUsed = now();
    this.keepEntry = null;
    lent.conn.onClose((why) => this.gone(why));
    this.keepAlive();
  }

  /** The server's id of the connection (LOCK.INFO's `client` for the hold). */
  get id() {
    return this.lent.conn.id;
  }

  keepAlive() {
    clock.cancel(this.keepEntry);
    this.keepEntry = null;
    if (this.closed !== null) return;
    this.keepEntry = clock.at(keepAliveAt(this.lastUsed), () => {
      this.keepEntry = null;
      if (this.closed !== null) return;
      if (now() >= keepAliveAt(this.lastUsed)) {
        this.lastUsed = now();
        // No answer is no loss: a connection that is gone says so by closing.
        within(this.lent.call(["PING"]), 5000, () => new Error("PING")).catch(() => {});
      }
      this.keepAlive();
    });
  }

  // Closed by the server or the network: the listeners (the hold) are told once.
  gone(why) {
    if (this.closed !== null) return;
    this.closed = why;
    clock.cancel(this.keepEntry);
    this.keepEntry = null;
    this.lent.drop();
    for (const fn of this.listeners.splice(0)) fn(why);
  }

  /** Calls `fn(why)` once when the connection closes before close(); at once if it has. */
  onClose(fn) {
    if (this.closed !== null) queueMicrotask(() => fn(this.closed));
    else this.listeners.push(fn);
  }

  /** Closes it (the hold ended): the server drops whatever it still has bound to it. */
  close() {
    if (this.closed !== null) return;
    this.closed = "closed by the client";
    this.listeners = [];
    clock.cancel(this.keepEntry);
    this.keepEntry = null;
    this.lent.drop();
  }

  /**
   * One command of the hold (as locker.send(): a renewal, a release, with `follow` its WAIT), on
   * the bound connection. Once it closed, or when a Cluster answers that the key lives elsewhere
   * now (a slot moved: the hold lives there by its lease only), on the locker's connections.
   */
  async send(args, key, ms, what, { follow = null } = {}) {
    if (this.closed !== null) return this.locker.send(args, key, ms, what, { follow });
    const deadline = now() + ms;
    const onTimeout = () => new LockTimeoutError(`${what} of ${key}: no answer within ${Math.round(ms)} ms`, key);
    this.lastUsed = now();
    try {
      const reply = await within(this.lent.call(args), ms, onTimeout);
      if (!follow) return reply;
      return (await followUp(follow, reply, (a) => within(this.lent.call(a), deadline - now(), onTimeout))).value;
    } catch (err) {
      if (!(this.locker.conns.cluster && elsewhere(err))) throw err;
      return this.locker.send(args, key, Math.max(0, deadline - now()), what, { follow });
    }
  }
}

/**
 * A grant asked without waiting (`args`: LOCK.ACQUIRE or LOCK.ACQUIREALL, with EPHEMERAL) on a
 * connection opened for it: { reply, lent }, the connection to bind the hold to (the caller
 * closes it if nothing was granted). In a Cluster, MOVED, ASK and TRYAGAIN are followed on a
 * new connection to the node named, until `ms`.
 */
async function ownedRequest(locker, key, args, ms, follow) {
  const conns = locker.conns;
  const deadline = now() + ms;
  const onTimeout = () => new LockTimeoutError(`acquire of ${key}: no answer within ${Math.round(ms)} ms`, key);
  let ask = null;
  for (let attempt = 0; ; attempt++) {
    const address = ask || conns.addressFor(key);
    const asking = ask !== null;
    ask = null;
    const lent = await within(conns.own(address), deadline - now(), onTimeout);
    try {
      let reply = await within(lent.call(args, asking), deadline - now(), onTimeout);
      if (follow) reply = (await followUp(follow, reply, (a) => within(lent.call(a), deadline - now(), onTimeout))).value;
      return { reply, lent };
    } catch (err) {
      lent.drop();
      if (!(conns.cluster && elsewhere(err))) throw err;
      const to = redirection(err);
      if (to && to.kind === "MOVED") {
        conns.slots[to.slot] = to.address;
        conns.refresh();
      } else if (to) ask = to.address;
      const wait = to && attempt < 3 ? 0 : retryPause(attempt);
      if (now() + wait >= deadline) throw Object.assign(onTimeout(), { cause: err });
      if (wait) await pause(wait);
    }
  }
}

module.exports = { Bound, ownedRequest, KEEPALIVE_MS, keepAliveAt };

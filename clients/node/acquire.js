// Taking a lock: tryAcquire() (a direct grant, or a wait in the server, then the durability
// follow-ups and the lease clock's start) and the wait itself, on a connection of its own, with
// what ends it (abort, quit) and what moves it (a dropped connection, a Cluster's redirections).
"use strict";

const { LockError, LockTimeoutError } = require("./errors");
const durable = require("./durable");
const multi = require("./multi");
const { now, pause, within, WAIT_GRACE_MS, COMMAND_TIMEOUT_MS } = require("./clock");
const { newToken, shown, checkName, positiveMs, modeArgs, abortReason } = require("./args");
const { errorText, translate, str, CONNECTION_LOST, isReply, parseGrant } = require("./replies");
const { redirection, RETRY_LATER, retryPause } = require("./cluster");
const { followUp } = require("./connections");
const { Hold } = require("./hold");
const { Bound, ownedRequest } = require("./bound");
const { MULTI_TOOLS, MultiHold } = require("./tools");

/**
 * As acquire(), but resolves to null when the lock is not granted. `signal` (an AbortSignal)
 * ends a wait: the server drops the waiter (CLIENT UNBLOCK, else its connection is closed),
 * then the call rejects with the signal's reason. A wait whose connection drops is sent again
 * once, with the time left; one that a Cluster moves (MOVED, ASK, TRYAGAIN) is sent to the
 * node that serves the key, with the time left; it never outlives `wait` by more than the
 * network's round trip.
 */
async function tryAcquire(locker, name, ttlMs, opts = {}, extra = null) {
  if (Array.isArray(name)) return multi.tryAcquireAll(locker, name, ttlMs, opts, MULTI_TOOLS, MultiHold);
  checkName(name);
  positiveMs(ttlMs, "ttlMs");
  if (opts === null || typeof opts !== "object") throw new TypeError(`the options must be an object, not ${shown(opts)}`);
  if (locker.closed) throw new LockError("the locker was closed (quit)", name);
  const signal = opts.signal;
  if (signal && signal.aborted) throw abortReason(signal);
  if (opts.onLost !== undefined && typeof opts.onLost !== "function") throw new TypeError(`onLost must be a function, not ${shown(opts.onLost)}`);
  const token = opts.token === undefined ? newToken() : String(opts.token);
  // `extra` (an election's campaign): { args }, more options (DATA).
  const args = ["LOCK.ACQUIRE", name, token, "PX", ttlMs, ...modeArgs(opts), ...(extra ? extra.args : [])];
  const wait = opts.wait === undefined ? 0 : opts.wait;
  if (!(wait === 0 || wait === Infinity || (typeof wait === "number" && wait > 0))) {
    throw new (typeof wait === "number" ? RangeError : TypeError)(`wait must be a number of milliseconds, not ${shown(wait)}`);
  }
  const d = durable.durability(opts);
  if (d) await durable.check(d, name, locker.aofChecked, (args) => locker.send(args, name, COMMAND_TIMEOUT_MS, "check"));
  // With `replicas`/`aof*`: WAIT/WAITAOF after the grant, on the connection that received it.
  const follow = d && durable.follow(d, ttlMs);
  const unwrap = (r) => (follow && r ? r.reply : r);
  let sent = now();
  const { reply, bound } = await request(locker, name, args, { wait, signal, follow, ephemeral: !!opts.ephemeral }, (err) => translate(err, name, "acquire"));
  // A hold bound to a connection of its own: its renewals and release go there (bound.js).
  const via = bound || locker;
  let hold = null;
  try {
    const grant = parseGrant(unwrap(reply), name);
    if (!grant) return null;
    if (d) await durable.confirm(d, name, reply, () => via.send(["LOCK.RELEASE", name, grant.token], name, Math.max(d.timeoutMs, 1000), "release"));
    if (wait !== 0 && now() - sent > ttlMs / 10) {
      // Granted after a wait: the lease began at the grant, some time after the request was
      // sent; renew now so that the lease clock counts from a known moment.
      const renewSent = now();
      const renewal = await via.send(["LOCK.EXTEND", name, grant.token, "PX", ttlMs], name, ttlMs, "extend", { follow }).catch(() => null);
      const renewed = unwrap(renewal);
      if (renewed != null && str(renewed) === "1") {
        if (!d || durable.acks(d, renewal).ok) sent = renewSent; // else not acknowledged: it does not count
      } else if (renewal !== null) return null; // gone already: a lease shorter than the round trip
    }
    hold = new Hold(locker, name, grant.token, grant.fence, ttlMs, sent, opts.onLost, d, bound);
    return hold;
  } finally {
    // Not handed out (not granted, not acknowledged, gone already): its connection is closed.
    if (bound && !hold) bound.close();
  }
}

/**
 * Sends a request for a grant (`args`), without waiting or waiting in the server (`wait`), and
 * gives { reply, bound }. With `ephemeral` it goes on a connection opened for the hold (never
 * the locker's shared one: the hold is bound to the connection that asked), kept as `bound` (a
 * Bound) when the reply is not nil; otherwise `bound` is null. Errors pass through `translate`.
 */
async function request(locker, key, args, { wait, signal, follow, ephemeral, giveBack = null }, translate) {
  const granted = (reply) => reply != null && (follow ? reply.reply != null : true);
  if (wait === 0) {
    try {
      if (!ephemeral) return { reply: await locker.send(args, key, COMMAND_TIMEOUT_MS, "acquire", { follow }), bound: null };
      const { reply, lent } = await ownedRequest(locker, key, args, COMMAND_TIMEOUT_MS, follow);
      if (!granted(reply)) lent.drop();
      return { reply, bound: granted(reply) ? new Bound(locker, lent) : null };
    } catch (err) {
      throw translate(err);
    }
  }
  const keep = ephemeral ? { lent: null } : null;
  const reply = await waitFor(locker, key, args, wait, signal, follow, keep, giveBack);
  if (keep && keep.lent && !granted(reply)) keep.lent.drop();
  return { reply, bound: keep && keep.lent && granted(reply) ? new Bound(locker, keep.lent) : null };
}

// A wait in the server, on a connection of its own (never the one other commands go through).
// `giveBack(late)`: gives back a grant that came after the wait was ended (default: LOCK.RELEASE).
async function waitFor(locker, name, args, wait, signal, follow = null, keep = null, giveBack = null) {
  const deadline = wait === Infinity ? Infinity : now() + wait;
  const conns = locker.conns;
  let requeued = false;
  let ask = null;
  for (let attempt = 0; ; attempt++) {
    if (locker.closed) throw new LockError("the locker was closed (quit) during the wait", name);
    if (signal && signal.aborted) throw abortReason(signal); // between two sends: no waiter in the server
    const left = deadline === Infinity ? 0 : Math.ceil(deadline - now());
    if (deadline !== Infinity && left <= 0) return null;
    const address = ask || conns.addressFor(name);
    const asking = ask !== null;
    ask = null;
    const noConnection = () => new LockTimeoutError(`${name}: no connection for the wait within ${wait} ms`, name);
    let conn;
    try {
      // A hold bound to the connection that waits (`keep`): one opened for it alone.
      conn = await within(keep ? conns.own(address) : conns.lend(address), deadline + WAIT_GRACE_MS - now(), noConnection);
    } catch (err) {
      if (err instanceof LockError || locker.closed) throw err;
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
      stopped = gently ? unblock(locker, conn, address) : Promise.resolve(conn.drop());
      stopped.then(() => end(why));
    };
    const onAbort = () => stop(abortReason(signal), true);
    if (signal && signal.aborted) {
      conn.done(true); // aborted while the connection was being found: nothing was sent
      throw abortReason(signal);
    }
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    locker.waits.add(stop);
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
        if (grant) await locker.send(["LOCK.RELEASE", name, grant.token], name, 1000, "release").catch(() => {});
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
      if (err === reason || err instanceof LockError || (signal && signal.aborted) || locker.closed) throw err;
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
      locker.waits.delete(stop);
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
async function unblock(locker, lent, address) {
  const run = async (args) => {
    const main = await locker.conns.main(address);
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

module.exports = { tryAcquire, waitFor, request };

// The locker's own connections (see drivers.js): one for commands and a pool for waits, per node
// in a Cluster, with the slot table the locker keeps itself; every command bounded by the clock.
"use strict";

const { LockError, LockTimeoutError } = require("./errors");
const durable = require("./durable");
const { now, pause, within } = require("./clock");
const { errorText, str, CONNECTION_LOST, isReply } = require("./replies");
const { keySlot, redirection, RETRY_LATER, retryPause } = require("./cluster");
const { splitAddress } = require("./drivers");

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

  /**
   * A connection of its own for one hold bound to it (EPHEMERAL), as lend() gives, but never
   * pooled: done() and drop() close it. No reconnection, queue or timeout of the application's
   * (drivers.js): its close is the hold's end.
   */
  async own(address) {
    const conn = this.track(await this.connector.open(address, "owned"));
    try {
      if (this.closed) throw new LockError("the locker was closed (quit)");
      await conn.ready();
      conn.id = str(await conn.call(["CLIENT", "ID"]));
    } catch (err) {
      this.forget(conn);
      throw err;
    }
    const drop = () => this.forget(conn);
    return { conn, call: (args, asking) => conn.call(args, asking), drop, done: drop };
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

module.exports = {
  followUp,
  Connections,
};

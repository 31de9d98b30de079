// Observing an election, decided without I/O (election.js does the I/O): the first LOCK.OBSERVE asks for the current
// holder, each later one waits in the server AFTER the fence last seen and SEEN the data seen
// with it (a change made while the observer was away or reconnecting is answered at once); a
// holder is given out when its fence is above every term given out before (never an older term),
// or when it is the term given out last with other data (a value proclaimed: proclaim.js), and
// "nobody leads" (null) when the key is free ([0, nil]) after a leader was given out, once per
// vacancy.
"use strict";

const { LockError } = require("./errors");

/**
 * The longest one LOCK.OBSERVE … BLOCK waits before it is sent again (ms): an observer whose
 * connection went silent (a partition) finds out within this (plus the read's grace) and reconnects.
 */
const OBSERVE_BLOCK_MS = 5000;

/** The pauses between tries of an observation (and of a run's campaign) that failed: the first, doubled up to the last. */
const RETRY_FIRST_MS = 50;
const RETRY_MOST_MS = 1000;

const toData = (v) => (v === undefined || v === null ? null : Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
const sameData = (a, b) => (a === null || b === null ? a === b : a.equals(b));

/**
 * Where one observer stands: the holder last seen (its fence, sent as AFTER, and its data, sent as
 * SEEN: empty for none), the leader given out last (term and data), whether the last thing given
 * out was a leader (a vacancy is given out once, after a leader), whether the server takes SEEN,
 * its failures in a row.
 */
class Observation {
  constructor(blockMs = OBSERVE_BLOCK_MS) {
    this.blockMs = blockMs;
    this.seen = null;
    this.seenData = null;
    this.last = 0n;
    this.lastData = null;
    this.leading = false;
    this.withSeen = true;
    this.failures = 0;
  }

  /** The first: the current holder, at once. Then: a wait in the server until the holder differs from the one last seen (its fence or its data). */
  args(name) {
    if (this.seen === null) return ["LOCK.OBSERVE", name];
    const seen = this.withSeen ? ["SEEN", this.seenData || ""] : [];
    return ["LOCK.OBSERVE", name, "AFTER", this.seen.toString(), ...seen, "BLOCK", this.blockMs];
  }

  /**
   * What to give out: a new leader ({ term, data }), or the leader given out last with new data (a
   * value proclaimed); null, a vacancy (nobody holds the key, [0, nil], and the last thing given
   * out was a leader); or undefined, nothing: the wait ended without a change (nil), the key is
   * still free, the fence is below the last term given out, or it is that term with its data given out already.
   */
  answer(reply) {
    this.failures = 0;
    if (reply === null || reply === undefined) return undefined;
    if (!Array.isArray(reply) || reply.length !== 2) throw new LockError(`unexpected LOCK.OBSERVE reply: ${reply}`);
    const fence = BigInt(String(reply[0]));
    const data = toData(reply[1]);
    this.seen = fence;
    this.seenData = data;
    if (fence === 0n) {
      if (!this.leading) return undefined;
      this.leading = false;
      return null;
    }
    if (fence < this.last || (fence === this.last && (!this.leading || sameData(data, this.lastData)))) return undefined;
    this.last = fence;
    this.lastData = data;
    this.leading = true;
    return { term: fence, data };
  }

  /** A server whose LOCK.OBSERVE does not know SEEN (an older redislock): observed by fence alone from now on. True if so. */
  refusedSeen(message) {
    if (!this.withSeen || !/unknown option 'SEEN'/.test(message)) return false;
    this.withSeen = false;
    return true;
  }

  /** The pause before trying again after a failure (ms). */
  failed() {
    const pauseMs = Math.min(RETRY_FIRST_MS * 2 ** this.failures, RETRY_MOST_MS);
    this.failures++;
    return pauseMs;
  }
}

/** LOCK.INFO's reply (RESP2 flat array or RESP3 map) as [key, value] pairs with string keys. */
function pairs(reply) {
  const out = [];
  if (reply instanceof Map) for (const [k, v] of reply) out.push([String(k), v]);
  else for (let i = 0; i + 1 < reply.length; i += 2) out.push([String(reply[i]), reply[i + 1]]);
  return out;
}

/** Who LOCK.INFO shows leading: the holder's { term, data } (of a key of another kind, its holder with the highest fence), or null. */
function leaderOf(reply) {
  if (reply === null || reply === undefined) return null;
  const fields = new Map(pairs(reply));
  if (fields.has("fence") && fields.has("token")) return { term: BigInt(String(fields.get("fence"))), data: toData(fields.get("data")) };
  let top = null;
  for (const h of fields.get("holders") || []) {
    const holder = new Map(pairs(h));
    const term = BigInt(String(holder.get("fence")));
    if (!top || term > top.term) top = { term, data: toData(holder.get("data")) };
  }
  return top;
}

module.exports = { Observation, leaderOf, toData, OBSERVE_BLOCK_MS, RETRY_FIRST_MS, RETRY_MOST_MS };

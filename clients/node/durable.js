// Durable grants, without I/O: what acquire() with `replicas`, `aofLocal` or `aofReplicas` asks
// of the server after a grant or a renewal, and what the answers mean (see docs/clients.md).
//
// After a grant (direct or waited) and after each renewal the locker sends `WAIT numreplicas
// timeout` (and `WAITAOF numlocal numreplicas timeout`) on the connection that carried the grant
// or the renewal: both count the acknowledgements of that connection's latest write, and a
// connection that wrote nothing is answered at once, so they must follow the write on its own
// connection. connections.js and acquire.js carry such a request out as one exchange on a
// connection of its own (not the shared one: WAIT blocks it) and give back { reply, results }.
// Decided here: the follow-up command lines and their bounds, whether the results count as
// acknowledged, and the errors. A grant not acknowledged is released and rejects with
// NotReplicatedError; a renewal not acknowledged does not move the lease clock; extend() not
// acknowledged rejects with NotReplicatedError and leaves the lease clock where it was.
"use strict";

const { UnsupportedError, NotReplicatedError } = require("./errors");

/** How long the acknowledgements of one grant or renewal may take by default (ms). */
const DEFAULT_TIMEOUT_MS = 1000;

/** How long after a WAIT's own timeout its answer may still come (one crossing of the network). */
const ANSWER_GRACE_MS = 450;

const text = (v) => (Buffer.isBuffer(v) ? v.toString() : String(v));

function count(value, what) {
  if (value === undefined) return 0;
  if (typeof value !== "number") throw new TypeError(`${what} must be a whole number of replicas, not a ${typeof value}`);
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${what} must be a whole number of replicas (0 or more), not ${value}`);
  return value;
}

/**
 * The acknowledgements acquire()'s options ask for: { replicas, timeoutMs, aofLocal, aofReplicas },
 * or null when none is asked (then no WAIT is ever sent).
 */
function durability(opts) {
  const replicas = count(opts.replicas, "replicas");
  const aofReplicas = count(opts.aofReplicas, "aofReplicas");
  const aofLocal = opts.aofLocal === undefined ? false : opts.aofLocal;
  if (typeof aofLocal !== "boolean") throw new TypeError(`aofLocal must be a boolean, not a ${typeof aofLocal}`);
  let timeoutMs = DEFAULT_TIMEOUT_MS;
  if (opts.replicasTimeoutMs !== undefined) {
    timeoutMs = opts.replicasTimeoutMs;
    if (typeof timeoutMs !== "number") throw new TypeError(`replicasTimeoutMs must be a positive integer of milliseconds, not a ${typeof timeoutMs}`);
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new RangeError(`replicasTimeoutMs must be a positive integer of milliseconds, not ${timeoutMs}`);
  }
  if (!replicas && !aofLocal && !aofReplicas) return null;
  return { replicas, timeoutMs, aofLocal, aofReplicas };
}

const usesAof = (d) => d.aofLocal || d.aofReplicas > 0;

/**
 * The follow-ups of a grant or a renewal: { commands, boundMs }. Each waits at most the hold's
 * `replicasTimeoutMs`, and no longer than `leftMs` (the lease's time); never 0 (that waits forever).
 */
function follow(d, leftMs = Infinity) {
  const timeoutMs = Math.max(1, Math.min(d.timeoutMs, Math.floor(leftMs)));
  const commands = [];
  if (d.replicas) commands.push(["WAIT", d.replicas, timeoutMs]);
  if (usesAof(d)) commands.push(["WAITAOF", d.aofLocal ? 1 : 0, d.aofReplicas, timeoutMs]);
  return { commands, boundMs: timeoutMs + ANSWER_GRACE_MS };
}

/** A reply that wrote something to wait for: a grant (not nil), an EXTEND answered 1. */
const wanted = (reply) => reply != null && text(reply) !== "0";

/**
 * What the follow-ups' results say: { ok, replicas, local, error }. A follow-up that failed (no
 * answer, a dropped connection, an error) counts as not acknowledged.
 */
function acks(d, followed) {
  const results = (followed && followed.results) || [];
  const expected = (d.replicas ? 1 : 0) + (usesAof(d) ? 1 : 0);
  let ok = results.length === expected;
  let replicas;
  let local;
  let error;
  for (const result of results) {
    if (result instanceof Error) {
      error = error || result;
      ok = false;
    } else if (Array.isArray(result)) {
      // WAITAOF: [numlocal, numreplicas]
      local = Number(text(result[0]));
      const fsynced = Number(text(result[1]));
      ok = ok && local >= (d.aofLocal ? 1 : 0) && fsynced >= d.aofReplicas;
      replicas = replicas === undefined ? fsynced : Math.min(replicas, fsynced);
    } else {
      replicas = Number(text(result)); // WAIT: the number of replicas
      ok = ok && replicas >= d.replicas;
    }
  }
  return { ok, replicas, local, error };
}

/**
 * Checks, before the first grant, that the server can answer WAITAOF: `WAITAOF numlocal 0 1` is
 * answered at once (within 1 ms) where it can, with an unknown command where WAITAOF does not
 * exist (Redis before 7.2), and with an error where numlocal is asked and appendonly is off.
 */
const probe = (d) => ["WAITAOF", d.aofLocal ? 1 : 0, 0, 1];

/** The error of a refused WAITAOF (the check's, or a follow-up's), or null if it is another error. */
function refused(err, name) {
  const message = String((err && err.message) || err);
  if (/unknown command/i.test(message)) {
    return new UnsupportedError(
      `aofLocal/aofReplicas need WAITAOF, which this server does not have (Redis 7.2 or newer, Valkey 8 or newer): ${message}`,
      name,
    );
  }
  if (/appendonly/i.test(message)) return new UnsupportedError(`aofLocal needs appendonly yes on the master: ${message}`, name);
  return null;
}

function describe(d) {
  const parts = [];
  if (d.replicas) parts.push(`${d.replicas} replica(s)`);
  if (d.aofLocal) parts.push("the master's AOF fsync");
  if (d.aofReplicas) parts.push(`${d.aofReplicas} replica(s)' AOF fsync`);
  return parts.join(" and ");
}

/** The error of a grant (`what` = "grant") or an extension not acknowledged in time. */
function shortfall(d, a, name, what, released = false) {
  if (a.error) {
    const own = refused(a.error, name);
    if (own) return own;
  }
  const got = [];
  if (a.replicas !== undefined) got.push(`${a.replicas} replica(s)`);
  if (a.local !== undefined) got.push(`local fsync ${a.local}`);
  const answer = got.length ? got.join(", ") : a.error ? `no answer (${a.error.message || a.error})` : "no answer";
  let tail = "";
  if (what === "grant") tail = released ? " (released)" : " (the release was not answered: the hold ends with its lease)";
  return new NotReplicatedError(`the ${what} of ${name} was not acknowledged by ${describe(d)} within ${d.timeoutMs} ms: ${answer}${tail}`, name, {
    replicas: a.replicas,
    needed: Math.max(d.replicas, d.aofReplicas),
    local: a.local,
    neededLocal: d.aofLocal ? 1 : 0,
    released,
  });
}

/**
 * Before the first grant that asks for WAITAOF: the server must have it (and appendonly on, for
 * `aofLocal`), else UnsupportedError and nothing is taken. `send(args)` sends on the locker;
 * `checked` (a Set) remembers the kinds checked (with numlocal or without).
 */
async function check(d, name, checked, send) {
  const kind = d.aofLocal ? "local" : usesAof(d) ? "replicas" : null;
  if (kind === null || checked.has(kind)) return;
  try {
    await send(probe(d));
  } catch (err) {
    throw refused(err, name) || err;
  }
  checked.add(kind);
}

/**
 * A grant's acknowledgements (`reply`: { reply, results }): enough, or the grant is released
 * (`release()`, its failure ignored: the hold then ends with its lease) and NotReplicatedError
 * (UnsupportedError where the server refused WAITAOF) thrown.
 */
async function confirm(d, name, reply, release) {
  const a = acks(d, reply);
  if (a.ok) return;
  const released = await release().then(
    () => true,
    () => false,
  );
  throw shortfall(d, a, name, "grant", released);
}

module.exports = { DEFAULT_TIMEOUT_MS, durability, usesAof, follow, wanted, acks, probe, refused, shortfall, check, confirm };

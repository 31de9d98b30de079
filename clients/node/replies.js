// The server's answers, without I/O: its errors as the library's errors, whether an error is the
// server's own answer or the connection's, a grant and LOCK.INFO as values (fences as bigint).
"use strict";

const { LockError, LockLostError, UnsupportedError, LockKindError, StaleFenceError } = require("./errors");

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

/** The lock errors that the server's NOTOWNER and STALEFENCE answers stand for, or null. */
function lockErrorOf(err, name, what) {
  const text = errorText(err);
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
  return null;
}

/** A server error to one of the lock's own commands as the library's error, where it has one. */
function translate(err, name, what) {
  const text = errorText(err);
  if (isUnsupported(err)) return new UnsupportedError(`${what} is not supported by this server: ${text}`, name);
  const kind = text.match(KIND_MISMATCH);
  if (kind) return new LockKindError(text.replace(/^ERR /, ""), name, kind[1] === undefined ? undefined : Number(kind[1]), kind[2] !== undefined);
  return lockErrorOf(err, name, what) || err;
}

/**
 * The error of a guarded command (LOCK.CALL, LOCK.FENCE): NOTOWNER and STALEFENCE are the lock's;
 * a server that does not know the guard itself answers UnsupportedError; everything else is the
 * inner command's own error, as the client library gives it.
 */
function translateGuarded(err, name, what, guard) {
  const text = errorText(err);
  if (new RegExp(`unknown command '${guard.replace(".", "\\.")}'`, "i").test(text)) {
    return new UnsupportedError(`${what} is not supported by this server: ${text}`, name);
  }
  return lockErrorOf(err, name, what) || err;
}

const str = (v) => (Buffer.isBuffer(v) ? v.toString() : v == null ? v : String(v));


// How each library says a command's connection went away (ioredis, with maxRetriesPerRequest 0:
// "Reached the max retries per request limit"; node-redis: SocketClosedUnexpectedlyError).
const CONNECTION_LOST = /connection|closed|ECONN|socket|EPIPE|stream|max retries per request|offline|disconnect/i;

/** True for an error the server answered (not one of the connection). */
function isReply(err) {
  for (let p = err && Object.getPrototypeOf(err); p; p = Object.getPrototypeOf(p)) {
    const kind = p.constructor && p.constructor.name;
    if (kind === "ReplyError" || kind === "ErrorReply") return true; // ioredis, node-redis
  }
  return false;
}

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

module.exports = {
  errorText,
  isUnsupported,
  translate,
  translateGuarded,
  str,
  CONNECTION_LOST,
  isReply,
  parseGrant,
  parseInfo,
};

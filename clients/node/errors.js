// The errors of the redislock client (see index.d.ts).
"use strict";

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

/** No answer within the time the call could take: the network or the server is not answering. */
class LockTimeoutError extends LockError {}

/**
 * Fewer replicas (or fsyncs) than asked acknowledged a grant or an extension in time (`replicas`,
 * `aofLocal`, `aofReplicas`). After acquire() the grant has been released (`released`: the server
 * answered the release; if not, the hold ends with its lease); after extend() the hold is kept and
 * its lease clock was not moved. `replicas` and `local` are the counts the server reported
 * (undefined where no answer came), `needed` and `neededLocal` what was asked for.
 */
class NotReplicatedError extends LockError {
  constructor(message, name, { replicas, needed, local, neededLocal, released }) {
    super(message, name);
    this.replicas = replicas;
    this.needed = needed;
    this.local = local;
    this.neededLocal = neededLocal;
    this.released = released;
  }
}

/**
 * The keys of a multi-resource lock are not in one Cluster slot (the server's CROSSSLOT, or the
 * locker's own check on a Cluster, before anything is sent): give them one hash tag, {tag}:name.
 */
class CrossSlotError extends LockError {}

module.exports = {
  LockError,
  LockBusyError,
  LockLostError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
  LockTimeoutError,
  NotReplicatedError,
  CrossSlotError,
};

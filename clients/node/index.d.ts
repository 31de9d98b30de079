// Types of the redislock client for Node.js: ioredis 6 (Redis, Cluster) and node-redis 6 (createClient, createCluster).

/** What the locker uses of an ioredis client: `Redis` or `Cluster`. */
export interface IoredisClient {
  duplicate(...args: never[]): unknown;
  callBuffer(...args: never[]): unknown;
}

/** What the locker uses of a node-redis 6 client: `createClient()` or `createCluster()`, connected. */
export interface NodeRedisClient {
  duplicate(...args: never[]): unknown;
  sendCommand(...args: never[]): unknown;
}

/**
 * An ioredis client (`Redis` or `Cluster`), or a connected node-redis 6 client (`createClient()`
 * or `createCluster()`). Anything else is refused, by the types and at run time (TypeError).
 */
export type Client = IoredisClient | NodeRedisClient;

/** The release, as `major.minor.patch`: the same number as the module's (`INFO redislock`). */
export const version: string;

export type Arg = string | number | bigint | Buffer;

export interface AcquireOptions {
  /** Wait in the server up to this many ms (BLOCK); Infinity waits without limit. Default 0: no wait. */
  wait?: number;
  /** The owner token; default: 128 random bits as 32 hex characters. The same token re-grants. */
  token?: string;
  /** A shared (read) hold of a read/write lock (SHARED): many at once, never with an exclusive one. */
  shared?: boolean;
  /** One of `limit` places (1 to 1,000,000) of a semaphore (LIMIT); every hold of the key gives the same limit. */
  limit?: number;
  /**
   * Bound to a connection (EPHEMERAL) that the locker opens for this hold alone, with the client's
   * options (host, port, password, TLS; in a Cluster the key's node) but none of its timeouts and
   * no reconnection: the grant, the renewals and the release go on it, and it is kept alive while
   * the hold lives (the server's `timeout` never closes it). When it closes (CLIENT KILL, a server
   * restart, a reset) the server releases the hold at once, and the hold is signalled lost as soon
   * as the socket says so — which may be after the server granted the lock to someone else: write
   * with the fence. It is closed when the hold is released or lost.
   */
  ephemeral?: boolean;
  /**
   * Ends a wait: its connection is closed (the server drops the waiter at once) and the call
   * rejects with the signal's reason. An already aborted signal rejects before anything is sent.
   */
  signal?: AbortSignal;
  /**
   * Called once per loss, whatever reports it first: its lease ran out with no renewal answered
   * (by the local lease clock, before the server can grant the lock to anyone else), a renewal
   * found it gone, or (`ephemeral`) the connection it is bound to closed. `hold.signal` aborts
   * just before, with the same error.
   */
  onLost?: (error: LockLostError, hold: Hold) => void;
  /**
   * Report a grant only once this many replicas acknowledged it: `WAIT replicas timeout` on the
   * connection that received the grant (direct or waited). Fewer within `replicasTimeoutMs`: the
   * grant is released and the call rejects with NotReplicatedError. Each extension (and each
   * renewal of using()) waits likewise; one not acknowledged in time does not move the lease
   * clock (extend() rejects with NotReplicatedError). Default 0: no WAIT at all.
   */
  replicas?: number;
  /** How long each WAIT (or WAITAOF) may wait, in ms (at most the lease). Default 1000. */
  replicasTimeoutMs?: number;
  /**
   * Renew the hold every third of its TTL until it is released or lost, as using() does (and as
   * Python's lock without `timeout`, or with `auto_renew=True`). Default false: the hold's lease
   * is `ttlMs`, renewed only by extend() (or renewEvery()).
   */
  autoRenew?: boolean;
  /**
   * With WAITAOF: the grant is in the master's AOF on disk (needs appendonly yes). Redis 7.2+ or
   * Valkey 8+: the first acquire() that asks for it checks, and rejects with UnsupportedError
   * (nothing taken) where the server has no WAITAOF or appendonly is off.
   */
  aofLocal?: boolean;
  /** With WAITAOF: the grant is in the AOF on disk of this many replicas (as `aofLocal`). */
  aofReplicas?: number;
}

/** One holder of a lock, as LOCK.INFO lists it. */
export interface HolderInfo {
  token: string;
  fence: bigint;
  /** Remaining milliseconds of this holder's own lease. */
  ttl: number;
  /** The connection the hold is bound to with EPHEMERAL; 0 when unbound. */
  client: number;
  [field: string]: unknown;
}

export interface LockInfo {
  /** The owner of an exclusive lock (also in `holders`). */
  token?: string;
  /** The exclusive lock's fence, or a fence gate's highest. */
  fence?: bigint;
  /** Remaining milliseconds of the key: the latest lease. */
  ttl?: number;
  waiters?: number;
  mode?: "exclusive" | "shared" | "semaphore" | "gate";
  /** A semaphore's number of places. */
  limit?: number;
  /** The exclusive lock's EPHEMERAL connection; 0 when unbound. */
  client?: number;
  /** Every holder, in grant order. */
  holders?: HolderInfo[];
  [field: string]: unknown;
}

export declare class Hold {
  readonly name: string;
  readonly token: string;
  /** The fencing token of this grant; a bigint, exact beyond 2^53. */
  readonly fence: bigint;
  /** The lease's TTL in ms, as last set. */
  readonly ttl: number;
  /**
   * The lease's conservative local end, ms since the epoch: counted from the moment the request
   * that set the lease was sent, a little short of the TTL (clock drift).
   */
  readonly expiration: number;
  /** Milliseconds left on the lease by the local clock; 0 once it ran out. */
  readonly leaseLeft: number;
  /**
   * The lease clock of every hold, renewed or not: aborted (reason: a LockLostError) when the
   * lease's conservative local end comes with no renewal answered, when extend() or a renewal
   * finds the hold gone, or when the connection an `ephemeral` hold is bound to closes. Never
   * aborted once the hold is released.
   */
  readonly signal: AbortSignal;
  /**
   * Resets the lease to `ttlMs` from now (default: the last TTL). Rejects with LockLostError if the
   * hold is gone, LockTimeoutError without an answer within `timeoutMs` (default: the lease time left, at least 1 s).
   */
  extend(ttlMs?: number, timeoutMs?: number): Promise<Hold>;
  /** Resets the lease to the TTL it was acquired with (Python's reacquire()); rejects as extend(). */
  reacquire(): Promise<Hold>;
  /** Renews every third of `ttlMs` until the hold is released or lost (what `autoRenew` and using() do). */
  renewEvery(ttlMs: number): void;
  /** LOCK.INFO of the hold's key, or null when nobody holds it. */
  info(): Promise<LockInfo | null>;
  /**
   * Gives the lock back: true if it was still held, false if it had been lost already.
   * LockTimeoutError without an answer within the lease time left (at least 1 s); it can be called again.
   */
  release(): Promise<boolean>;
  /** True if the key still has this hold (its token among the holders, with this fence). */
  owned(): Promise<boolean>;
  /**
   * Runs the command atomically if this hold is still the lock's (LOCK.CALL): its reply and its
   * errors are the client library's own (as if sent directly); LockLostError if the hold is gone.
   */
  call(...command: Arg[]): Promise<unknown>;
}

/** The options of a lock on several keys: those of one key but `limit` (exclusive or `shared` only). */
export interface MultiAcquireOptions extends Omit<AcquireOptions, "limit" | "onLost"> {
  /** Called once when the set is lost: its lease ran out with no renewal of every key answered, or a renewal found any key gone. */
  onLost?: (error: LockLostError, hold: MultiHold) => void;
}

/**
 * A hold of several keys at once (LOCK.ACQUIREALL): one token on every key, one fence per key,
 * one lease clock for the set. `name` names the set (`[a, b]`); `fence` is the first key's.
 */
export declare class MultiHold extends Hold {
  /** The keys, in the order given. */
  readonly resources: Array<string | Buffer>;
  /** One fence per key, in the order of `resources`; bigints, exact beyond 2^53. */
  readonly fences: bigint[];
  /** The fence of one of the keys (RangeError for a key not in the set). */
  fenceOf(name: string | Buffer): bigint;
  /** The fence of each key, by name as given, in the order of `resources` (Python's `fences`). */
  readonly fencesByName: Map<string | Buffer, bigint>;
  /** LOCK.INFO of each key, in the order of `resources` (null for a key that holds no lock). */
  info(): Promise<Array<LockInfo | null>>;
  /** Resets every key's lease to the TTL the set was acquired with; rejects as extend(). */
  reacquire(): Promise<MultiHold>;
  /**
   * Resets every key's lease to `ttlMs` (one LOCK.EXTEND per key, in turn). LockLostError (the
   * set signalled lost) if any key is gone; LockTimeoutError if not every key was answered within
   * `timeoutMs`: the lease clock then stays where it was.
   */
  extend(ttlMs?: number, timeoutMs?: number): Promise<MultiHold>;
  /** Gives every key back (LOCK.RELEASEALL): true if every key was still held, false if any had been lost. */
  release(): Promise<boolean>;
  /** True if every key still has this hold (its token, with this grant's fence). */
  owned(): Promise<boolean>;
  /** Not for a hold of several keys: rejects with TypeError (guard writes with fenced() and fenceOf(name)). */
  call(...command: Arg[]): Promise<never>;
}

export declare class Locker {
  constructor(client: Client);
  /**
   * Takes the lock; rejects with LockBusyError if it is not granted (within `wait`). In a
   * Cluster, a wait that a slot migration moves is queued again on the node now serving the key,
   * with the time left.
   */
  acquire(name: string | Buffer, ttlMs: number, opts?: AcquireOptions): Promise<Hold>;
  /**
   * Takes every key at once, or none (LOCK.ACQUIREALL): 1 to 64 distinct names, in one slot on
   * a Cluster (CrossSlotError otherwise, before anything is sent). A wait queues on every key at
   * once, first come first served, and is granted when every key has room — never in part.
   * Rejects with LockBusyError if not granted (within `wait`).
   */
  acquire(names: Array<string | Buffer>, ttlMs: number, opts?: MultiAcquireOptions): Promise<MultiHold>;
  /** As acquire(), but resolves to null when not granted. */
  tryAcquire(name: string | Buffer, ttlMs: number, opts?: AcquireOptions): Promise<Hold | null>;
  tryAcquire(names: Array<string | Buffer>, ttlMs: number, opts?: MultiAcquireOptions): Promise<MultiHold | null>;
  /**
   * Runs `routine` while holding the lock, renewing it every third of `ttlMs`; `signal` is
   * aborted (reason: LockLostError) when a renewal finds the hold gone, or at the lease's
   * conservative local end when no renewal was answered: before the server can grant the lock
   * to anyone else. Releases at the end (bounded: the lease time left, at least 1 s).
   */
  using<T>(name: string, ttlMs: number, routine: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  using<T>(
    name: string,
    ttlMs: number,
    opts: AcquireOptions,
    routine: (signal: AbortSignal, hold: Hold) => Promise<T>,
  ): Promise<T>;
  /** using() over several keys: every key taken at once, renewed, and released together at the end. */
  using<T>(names: Array<string | Buffer>, ttlMs: number, routine: (signal: AbortSignal, hold: MultiHold) => Promise<T>): Promise<T>;
  using<T>(
    names: Array<string | Buffer>,
    ttlMs: number,
    opts: MultiAcquireOptions,
    routine: (signal: AbortSignal, hold: MultiHold) => Promise<T>,
  ): Promise<T>;
  /** LOCK.INFO, or null when nobody holds the lock. */
  info(name: string): Promise<LockInfo | null>;
  /** Whether anyone holds the lock, or any of the keys (a key of another type counts as held). */
  locked(name: string | Buffer | Array<string | Buffer>): Promise<boolean>;
  /**
   * LOCK.FENCE: runs the command if `fence` is at least the gate's highest; StaleFenceError
   * otherwise. The command's reply and errors are the client library's own.
   */
  fenced(gate: string, fence: bigint | number | string, ...command: Arg[]): Promise<unknown>;
  /**
   * A candidate of the election `name`: at most one candidate leads at a time, in a term that is a
   * fencing token. Nothing is sent until campaign(), leader() or observe().
   */
  election(name: string | Buffer, opts?: ElectionOptions): Election;
  /** True if the server knows the command. */
  supports(command: string): Promise<boolean>;
  /**
   * Ends the waits in progress (they reject with LockError), then closes the connections the
   * locker opened (not the client it was given); the holds bound to them (`ephemeral`, terms)
   * end there, and are signalled lost.
   */
  quit(): Promise<void>;
}

export interface ElectionOptions {
  /**
   * The lease of a term, in ms (default 10000), renewed every third of it until resign(): a leader
   * cut off from the server is signalled lost, and succeeded, within one lease.
   */
  leaseMs?: number;
  /** Public data kept with the term and shown to every observer (an address, a host name): 1 to 4096 bytes. */
  data?: string | Buffer;
  /**
   * Called once per loss of leadership: a renewal found the term gone, the lease clock ran out
   * before a renewal was answered (before the server can grant the next term), or the connection
   * the term is bound to closed (the server then hands the term on at once: the next leader may
   * be elected before this is called). `signal` aborts just before. Each term is bound to a
   * connection the locker opens for it alone (as acquire()'s `ephemeral`), closed when it ends.
   */
  onLost?: (error: LockLostError, election: Election) => void;
  /** A term is granted only once this many replicas acknowledged it, as for acquire() (NotReplicatedError otherwise). */
  replicas?: number;
  /** How long each WAIT may wait, in ms. Default 1000. */
  replicasTimeoutMs?: number;
}

/** Who leads: the term (the fence of the leader's grant) and the leader's data (null when it gave none). */
export interface Leader {
  term: bigint;
  data: Buffer | null;
}

export declare class Election {
  readonly name: string | Buffer;
  readonly leaseMs: number;
  /** The candidate's data, as sent (the value last proclaimed, once it proclaimed one). */
  readonly data: Buffer | null;
  /** This candidate leads: its term was granted, not resigned, and its lease clock has not run out. */
  readonly isLeader: boolean;
  /** The term this candidate leads in, or null. */
  readonly term: bigint | null;
  /** Milliseconds left on the term's lease by the local clock; 0 when not leading. */
  readonly leaseLeft: number;
  /** The latest term's lease clock: aborted (reason: a LockLostError) when leadership is lost. Null before the first term. */
  readonly signal: AbortSignal | null;
  /** The hold of the latest term (for hold.call()), or null before the first. */
  readonly hold: Hold | null;
  /**
   * Waits in the server until this candidate leads (LOCK.ACQUIRE … EPHEMERAL DATA … BLOCK, first
   * come, first served among the candidates) and resolves with the term, greater than every term
   * before it; at once if it leads already. The term is renewed every third of `leaseMs` until
   * resign(). `signal` ends the wait (the call rejects with its reason).
   */
  campaign(opts?: { signal?: AbortSignal }): Promise<bigint>;
  /** As above; `wait` (ms): null if not elected by then (0: without waiting). */
  campaign(opts: { signal?: AbortSignal; wait: number }): Promise<bigint | null>;
  /** Ends the term: true if this candidate still led, false if it did not lead or its term was lost. */
  resign(): Promise<boolean>;
  /**
   * The leader's data becomes `data` (1 to 4096 bytes) in the same term: a re-grant with the term's
   * token and the new DATA on the term's connection, which renews the lease too. Every observer sees
   * it ({ term, data }: the same term, the new data), and later campaigns send it. Rejects with
   * LockLostError if this candidate does not lead (never elected, resigned, or the term lost).
   */
  proclaim(data: string | Buffer): Promise<void>;
  /** Who leads now (LOCK.INFO), or null when nobody does. */
  leader(): Promise<Leader | null>;
  /**
   * Each new leader as it is granted (LOCK.OBSERVE … AFTER … SEEN … BLOCK): the current one first, then every
   * later one, terms strictly increasing, through reconnects; the same term again with its new data
   * each time the leader proclaims a value (the latest one after a reconnect); null when, after a leader, nobody
   * leads (a resignation or a lease run out with no candidate waiting), once per vacancy. Rejects with the signal's reason when
   * `signal` aborts, with LockError when the locker quits, with UnsupportedError on a server without LOCK.OBSERVE.
   */
  observe(opts?: { signal?: AbortSignal }): AsyncIterableIterator<Leader | null>;
  /**
   * Campaigns; once elected calls `onElected(term)`, then `fn(signal)`: `signal` aborts the moment
   * leadership is lost (reason: the LockLostError), when the run is stopped, and when fn settles —
   * always before the term is resigned, so the next leader starts after it. When fn returns, the
   * term is resigned and the candidate campaigns again, until `signal` (run's option) aborts or
   * stop() is called; then the promise resolves. A rejection of fn resigns and ends the run with it.
   * `onNewLeader` is called with each change an observer of the run sees (null: nobody leads).
   */
  run(fn: (signal: AbortSignal) => unknown, opts?: RunOptions): Promise<void>;
  /** Ends run(): no more campaigns (a campaign waiting ends), the work's signal aborted, the term resigned. */
  stop(reason?: unknown): void;
}

export interface RunOptions {
  /** Ends the run when it aborts. */
  signal?: AbortSignal;
  /** Called once per term, before fn. */
  onElected?: (term: bigint) => unknown;
  /** Called once per change an observer of the run sees: the new leader, or null when nobody leads. */
  onNewLeader?: (leader: Leader | null) => void;
}

export declare class LockError extends Error {
  readonly lockName: string;
}
export declare class LockBusyError extends LockError {}
export declare class LockLostError extends LockError {}
/** No answer within the time the call could take (a wait's timeout, the lease time left). */
export declare class LockTimeoutError extends LockError {}
/** The keys of a multi-resource lock are not in one Cluster slot: give them one hash tag ({tag}:name). */
export declare class CrossSlotError extends LockError {}
export declare class UnsupportedError extends LockError {}
/** The request does not fit the key: a semaphore with another limit (`limit`: the key's), LIMIT on a read/write lock, or the token holds the key in the other mode (`otherMode`). */
export declare class LockKindError extends LockError {
  readonly limit?: number;
  readonly otherMode: boolean;
}
/**
 * Fewer replicas (or fsyncs) than asked acknowledged a grant or an extension in time. After
 * acquire() the grant was released (`released`: the server answered the release; if not, the hold
 * ends with its lease); after extend() the hold is kept and its lease clock was not moved.
 */
export declare class NotReplicatedError extends LockError {
  /** Replicas that acknowledged (WAIT), or the fewest of WAIT's and WAITAOF's; undefined without an answer. */
  readonly replicas?: number;
  readonly needed: number;
  /** WAITAOF's local fsync count (0 or 1); undefined without WAITAOF or an answer. */
  readonly local?: number;
  readonly neededLocal: number;
  readonly released: boolean;
}
export declare class StaleFenceError extends LockError {
  readonly fence?: bigint;
  readonly highest?: bigint;
}

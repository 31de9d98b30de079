// Leader election: locker.election(name, { leaseMs, data, onLost }) (see index.d.ts and
// docs/clients.md). A candidate is a hold of the locker taken EPHEMERAL with the candidate's
// public data (DATA), waiting in the server (first come, first served among the candidates) and
// renewed every third of its lease until resign(): campaign() is its acquire, the term is its
// fence, its lease clock (signal, onLost) says when leadership may be gone, resign() is its
// release. The term is bound to a connection the locker opens for it alone (bound.js): its
// renewals go there, so no timeout of the server's or the application's closes it; when it
// closes (the process dies, CLIENT KILL, a restart) the server hands the term to the next
// candidate at once and this candidate is told as soon as its socket says so; when the term is
// lost or resigned, that connection is closed.
//
// Observation is decided in observation.js (no I/O).
"use strict";

const { LockError, LockKindError, UnsupportedError } = require("./errors");
const { isReply } = require("./replies");
const { Run } = require("./run");
const { proclaim } = require("./proclaim");
const { Observation, leaderOf, OBSERVE_BLOCK_MS, RETRY_FIRST_MS, RETRY_MOST_MS } = require("./observation");

/** The lease of a term unless the election is given another (ms): a leader cut off from the server is succeeded within it. */
const DEFAULT_LEASE_MS = 10000;

/** The bounds of DATA (bytes), as the server has them. */
const MAX_DATA = 4096;

/** Answers that say "not now": the observation looks the key's node up again and tries again after a pause. */
const NOT_NOW = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN|LOADING|BUSY|MASTERDOWN)\b/;

function dataArg(data) {
  if (data === undefined || data === null) return null;
  let value;
  if (typeof data === "string") value = Buffer.from(data);
  else if (Buffer.isBuffer(data)) value = data;
  else throw new TypeError(`data must be a string or a Buffer, not a value of type ${typeof data}`);
  if (value.length < 1 || value.length > MAX_DATA) throw new RangeError(`data must be 1 to ${MAX_DATA} bytes, not ${value.length}`);
  return value;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pauseUnless(t, ms, signal) {
  if (!signal) return t.pause(ms);
  return new Promise((resolve) => {
    const done = () => {
      signal.removeEventListener("abort", done);
      resolve();
    };
    signal.addEventListener("abort", done, { once: true });
    t.pause(ms).then(done);
  });
}

class Election {
  /** Made by locker.election(); `tools`: the locker module's own helpers. */
  constructor(locker, name, opts, tools) {
    tools.checkName(name);
    if (opts === null || typeof opts !== "object") throw new TypeError(`the options must be an object, not ${tools.shown(opts)}`);
    this.locker = locker;
    this.tools = tools;
    this.name = name;
    this.leaseMs = tools.positiveMs(opts.leaseMs === undefined ? DEFAULT_LEASE_MS : opts.leaseMs, "leaseMs");
    /** The candidate's public data (a Buffer), or null. */
    this.data = dataArg(opts.data);
    if (opts.onLost !== undefined && typeof opts.onLost !== "function") throw new TypeError(`onLost must be a function, not ${tools.shown(opts.onLost)}`);
    this.onLost = opts.onLost || null;
    this.durable = { replicas: opts.replicas, replicasTimeoutMs: opts.replicasTimeoutMs };
    /** The hold of the latest term (released or lost once it ended), or null before the first. */
    this.hold = null;
    this.campaigning = false;
    /** The run going on (run()): { run, stop }, or null. */
    this.running = null;
  }

  /** This candidate leads: its term was granted, not resigned, and its lease clock has not run out. */
  get isLeader() {
    const h = this.hold;
    return h !== null && !h.released && !h.signal.aborted && h.leaseLeft > 0;
  }

  /** The term this candidate leads in (a bigint), or null. */
  get term() {
    return this.isLeader ? this.hold.fence : null;
  }

  /** Milliseconds left on the term's lease by the local clock; 0 when not leading (Python's lease_left). */
  get leaseLeft() {
    return this.isLeader ? this.hold.leaseLeft : 0;
  }

  /** The latest term's lease clock: aborted (reason: a LockLostError) when leadership is lost. Null before the first term. */
  get signal() {
    return this.hold ? this.hold.signal : null;
  }

  /**
   * Waits in the server until this candidate leads and resolves with the term (a bigint); at once
   * if it leads already. `wait` (ms, default Infinity): null if not elected by then (0: without
   * waiting). `signal` ends the wait: the call rejects with its reason.
   */
  async campaign({ signal, wait = Infinity } = {}) {
    if (this.isLeader) return this.hold.fence;
    if (this.campaigning) throw new LockError(`a campaign of this election of ${this.name} is already waiting`, this.name);
    this.campaigning = true;
    let hold = null;
    try {
      hold = await this.locker.tryAcquire(
        this.name,
        this.leaseMs,
        { wait, signal, ephemeral: true, onLost: (err, lost) => this.termLost(err, lost), ...this.durable },
        { args: this.data ? ["DATA", this.data] : [] },
      );
    } finally {
      this.campaigning = false;
    }
    if (!hold) return null;
    this.hold = hold;
    hold.renewEvery(this.leaseMs);
    return hold.fence;
  }

  // The hold of a term was lost: onLost, for the current term only. (Leadership lost is told by
  // `signal`, Python's `lost` event; `lost` is no method here, so as not to read as that.)
  termLost(err, hold) {
    if (hold !== this.hold) return;
    if (this.onLost) this.onLost(err, this);
  }

  /**
   * Ends the term (LOCK.RELEASE): true if this candidate still led, false if it did not lead or its
   * term was lost. LockTimeoutError without an answer: the term is kept, call it again.
   */
  async resign() {
    const hold = this.hold;
    if (!hold || hold.released) return false;
    const wasLost = hold.signal.aborted;
    const released = await hold.release();
    return released && !wasLost;
  }

  /**
   * The leader's data becomes `data` in the same term (LOCK.ACQUIRE with the term's token and the
   * new DATA, on the term's connection: a re-grant, its lease renewed); observers see the new value
   * and later campaigns send it. LockLostError if this candidate does not lead. See proclaim.js.
   */
  async proclaim(data) {
    return proclaim(this, dataArg(data));
  }

  /**
   * Campaigns; once elected calls onElected(term), then fn(signal): `signal` aborts the moment
   * leadership is lost (with the term's LockLostError), when the run is stopped, and when fn's
   * promise settles — always before the term is resigned, so the next leader starts after it.
   * When fn returns the term is resigned and the candidate campaigns again, until the run is
   * stopped (`signal` aborts, or stop()); then the promise resolves. A rejection of fn resigns and
   * ends the run with it. onNewLeader is called with each change an observer of the run sees:
   * { term, data }, or null when nobody leads.
   */
  async run(fn, { signal, onElected = null, onNewLeader = null } = {}) {
    const t = this.tools;
    if (typeof fn !== "function") throw new TypeError(`fn must be a function, not ${t.shown(fn)}`);
    if (this.running) throw new LockError(`a run of the election ${this.name} goes on already`, this.name);
    const run = new Run(this.name, { onElected, onNewLeader });
    const stopping = new AbortController();
    const stop = (reason) => {
      if (stopping.signal.aborted) return;
      const why = reason || new LockError(`the run of the election ${this.name} was stopped`, this.name);
      run.stop(why);
      stopping.abort(why);
    };
    const onAbort = () => stop(t.abortReason(signal));
    if (signal) {
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
    this.running = { run, stop };
    const following = onNewLeader ? this.follow(run, stopping.signal) : null;
    try {
      let pause = RETRY_FIRST_MS;
      while (run.campaigning()) {
        let term;
        try {
          term = await this.campaign({ signal: stopping.signal });
        } catch (err) {
          if (run.stopped) break;
          // A server that does not answer (restarting, failing over, killed) does not end the
          // run: it campaigns again once the server answers. Its refusals do.
          if (isReply(err) || err instanceof UnsupportedError || err instanceof LockKindError || !(err instanceof LockError)) throw err;
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, pause);
            stopping.signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
          });
          pause = Math.min(pause * 2, RETRY_MOST_MS);
          continue;
        }
        pause = RETRY_FIRST_MS;
        await this.work(run, fn, term);
      }
    } finally {
      run.end();
      this.running = null;
      if (signal) signal.removeEventListener("abort", onAbort);
      stopping.abort();
      await following;
    }
  }

  /** Ends run(): no more campaigns (a campaign waiting ends), the work's signal aborted, the term resigned. */
  stop(reason) {
    if (this.running) this.running.stop(reason);
  }

  // One term of a run: fn called with the term's signal, which the hold's loss aborts at once.
  async work(run, fn, fence) {
    const hold = this.hold;
    const term = run.elected(fence, () => this.isLeader && this.hold === hold);
    const onLoss = () => run.lost(term, hold.signal.reason);
    hold.signal.addEventListener("abort", onLoss, { once: true });
    try {
      if (run.onElected) await run.onElected(fence);
      if (run.working(term)) await fn(term.signal);
    } finally {
      hold.signal.removeEventListener("abort", onLoss);
      run.finished(term);
      await this.resign().catch(() => hold.drop()); // without an answer: its connection closed ends it
    }
  }

  // The run's observer: onNewLeader for each change, until the run ends (`signal` aborts).
  async follow(run, signal) {
    try {
      for await (const change of this.observing(signal)) {
        if (!run.seen()) continue;
        try {
          run.onNewLeader(change);
        } catch (e) {
          queueMicrotask(() => {
            throw e; // the application's callback failed: as any uncaught error of its own
          });
        }
      }
    } catch {
      // the run ended (the signal aborted), or observation is impossible here (no LOCK.OBSERVE)
    }
  }

  /** Who leads now (LOCK.INFO): { term, data } (data a Buffer, or null), or null when nobody does. */
  async leader() {
    const t = this.tools;
    return leaderOf(await this.locker.send(["LOCK.INFO", this.name], this.name, t.COMMAND_TIMEOUT_MS, "leader"));
  }

  /**
   * Each new leader as it is granted, { term, data }: the current one first (if any), then every
   * later one, terms strictly increasing; the same term again with its new data when the leader
   * proclaims a value (the latest: values proclaimed while the observer was away are not
   * replayed); null when, after a leader, nobody leads (a resignation
   * or a lease run out with no candidate waiting), once per vacancy. A handoff to a waiting
   * candidate is one change: no null between. A connection that fails
   * is opened again and the wait re-armed AFTER the fence (and SEEN the data) last seen. Ends when `signal` aborts
   * (rejecting with its reason) or the locker quits (LockError); UnsupportedError on a server
   * without LOCK.OBSERVE.
   */
  observe({ signal } = {}) {
    return this.observing(signal);
  }

  async *observing(signal) {
    const t = this.tools;
    const observation = new Observation();
    for (;;) {
      if (signal && signal.aborted) throw t.abortReason(signal);
      if (this.locker.closed) throw new LockError("the locker was closed (quit)", this.name);
      let reply;
      try {
        reply = await this.observeOnce(observation.args(this.name), signal);
      } catch (err) {
        if (signal && signal.aborted) throw t.abortReason(signal);
        if (this.locker.closed) throw new LockError("the locker was closed (quit) during the observation", this.name);
        if (t.isReply(err)) {
          if (observation.refusedSeen(err.message)) continue;
          if (t.isUnsupported(err)) throw new UnsupportedError(`observe is not supported by this server: ${err.message}`, this.name);
          if (!NOT_NOW.test(err.message)) throw err;
        }
        // No answer, no connection, or "not now": looked up again, and asked again after a pause.
        this.locker.conns.refresh();
        await pauseUnless(t, observation.failed(), signal);
        continue;
      }
      const found = observation.answer(reply);
      if (found !== undefined) yield found;
    }
  }

  // One LOCK.OBSERVE on a connection of its own: a wait holds its connection. Bounded by its BLOCK
  // plus the grace of an answer; ended by `signal` and by quit() (the connection is closed, which
  // the server answers by dropping the observer).
  async observeOnce(args, signal) {
    const t = this.tools;
    const locker = this.locker;
    const boundMs = (args.length > 2 ? OBSERVE_BLOCK_MS : 0) + t.WAIT_GRACE_MS + (args.length > 2 ? 0 : t.COMMAND_TIMEOUT_MS);
    const deadline = t.now() + boundMs;
    const timedOut = () => new t.LockTimeoutError(`observe ${this.name}: no answer within ${boundMs} ms`, this.name);
    const lent = await t.within(locker.conns.lend(locker.conns.addressFor(this.name)), boundMs, timedOut);
    let end;
    const ended = new Promise((_, reject) => (end = reject));
    ended.catch(() => {});
    const stop = (why) => {
      lent.drop();
      end(why);
    };
    const onAbort = () => stop(t.abortReason(signal));
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    locker.waits.add(stop);
    let healthy = false;
    try {
      if (signal && signal.aborted) throw t.abortReason(signal);
      const reply = await t.within(Promise.race([lent.call(args), ended]), deadline - t.now(), () => {
        lent.drop();
        return timedOut();
      });
      healthy = true;
      return reply;
    } catch (err) {
      healthy = t.isReply(err);
      throw err;
    } finally {
      locker.waits.delete(stop);
      if (signal) signal.removeEventListener("abort", onAbort);
      lent.done(healthy);
    }
  }
}

module.exports = { Election, DEFAULT_LEASE_MS };

// The library's time: one monotonic clock and one timer for every deadline of the process (lease
// ends, renewals, the bounds of its calls), the lease clock's arithmetic, and bounded calls.
"use strict";

/** The lock's moments: a monotonic clock in ms (performance.now()), immune to wall-clock steps. */
const now = () => performance.now();

/**
 * Every deadline of the library (lease ends, renewals, the bounds of its calls) is an entry of
 * one heap, served by a single timer set for the earliest: any number of holds cost one timer.
 * The timer is unref'd: the locker's connections keep the process alive while it works.
 */
class Clock {
  constructor() {
    this.heap = [];
    this.timer = null;
    this.timerAt = Infinity;
    this.cancelled = 0;
  }

  /** Runs `fn` at `at` (now() ms); returns the entry, for cancel(). */
  at(at, fn) {
    const entry = { at, fn };
    const heap = this.heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].at <= at) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = entry;
    if (at < this.timerAt) this.arm();
    return entry;
  }

  cancel(entry) {
    if (!entry || !entry.fn) return;
    entry.fn = null;
    // Cancelled entries leave the heap when they come up, or all at once when they are most of it.
    if (++this.cancelled > 64 && this.cancelled > this.heap.length / 2) this.compact();
  }

  compact() {
    const live = this.heap.filter((e) => e.fn);
    this.heap = [];
    this.cancelled = 0;
    for (const e of live.sort((a, b) => a.at - b.at)) this.heap.push(e); // sorted: a valid heap
    this.arm();
  }

  pop() {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const c = l + 1 < heap.length && heap[l + 1].at < heap[l].at ? l + 1 : l;
        if (heap[c].at >= last.at) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = last;
    }
    return top;
  }

  arm() {
    while (this.heap.length && !this.heap[0].fn) {
      this.pop();
      this.cancelled--;
    }
    const next = this.heap.length ? this.heap[0].at : Infinity;
    if (next === this.timerAt && this.timer) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = next;
    if (next === Infinity) return;
    // setTimeout takes at most 2^31 - 1 ms; a later entry is looked at again then.
    this.timer = setTimeout(() => this.run(), Math.min(Math.max(0, Math.ceil(next - now())), 2147483647));
    if (typeof this.timer.unref === "function") this.timer.unref();
  }

  run() {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    while (this.heap.length && this.heap[0].at <= t) {
      const entry = this.pop();
      const fn = entry.fn;
      if (!fn) {
        this.cancelled--;
        continue;
      }
      entry.fn = null;
      try {
        fn();
      } catch {
        // an entry's own failure is its own; the others still run
      }
    }
    this.arm();
  }
}

const clock = new Clock();

/** Resolves after `ms`, on the clock. */
const pause = (ms) => new Promise((resolve) => clock.at(now() + ms, resolve));

// --- bounded calls -------------------------------------------------------------------------------
//
// The client libraries queue a command while their connection is down and retry or re-send it
// (ioredis re-sends a command in flight when it reconnects); none of that may outlive a lease or
// a wait. Every command of the locker is therefore raced against the clock: past its bound it
// rejects with LockTimeoutError, whatever the library does with it afterwards.

/**
 * The local clock counts every lease this much shorter than the server (a share plus a constant,
 * as Redlock's clock drift), so that a holder is told of a loss before the server frees the lock.
 */
const CLOCK_DRIFT = 0.01;
const CLOCK_SLACK_MS = 2;
const leaseEnd = (sent, ttlMs) => sent + ttlMs - ttlMs * CLOCK_DRIFT - CLOCK_SLACK_MS;

/** How long after its own timeout the answer to a wait may still come (one crossing of the network). */
const WAIT_GRACE_MS = 450;

/** The bound of a command that has no tighter one (a release, a check). */
const COMMAND_TIMEOUT_MS = 5000;

/** Resolves or rejects as `promise`, or rejects with `onTimeout()` after `ms` (Infinity: never). */
function within(promise, ms, onTimeout) {
  promise.catch(() => {}); // a late failure after the timer won is not unhandled
  if (!Number.isFinite(ms)) return promise;
  return new Promise((resolve, reject) => {
    const entry = clock.at(now() + Math.max(0, ms), () => reject(onTimeout()));
    promise.then(
      (v) => {
        clock.cancel(entry);
        resolve(v);
      },
      (e) => {
        clock.cancel(entry);
        reject(e);
      },
    );
  });
}

module.exports = {
  now,
  Clock,
  clock,
  pause,
  leaseEnd,
  WAIT_GRACE_MS,
  COMMAND_TIMEOUT_MS,
  within,
};

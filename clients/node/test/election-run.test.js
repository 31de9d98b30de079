// election.run() and the observation of a vacancy, with ioredis and node-redis, against a real
// server: observe() gives out null once when the last leader resigns with no candidate waiting;
// run()'s work is aborted (its signal) when leadership is lost — its connection killed, its key
// deleted, its lease run out behind the fault proxy — and the candidate campaigns again; a
// successor's work starts only after its predecessor's signal aborted (recorded clocks); each
// callback is called once per event. The run's decisions (run.js) are also driven without a server.
// Waits are for events the run records, never sleeps; assertions compare recorded clocks and counts.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");

const { Locker } = require("..");
const { Run, LOST, STOPPED, RETURNED } = require("../run");
const { Observation } = require("../observation");
const { Server, LIBRARIES } = require("./servers");
const { Proxy } = require("./proxy");

const LEASE = 1200;

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

/** Polls server state that no event announces (a candidate queued). */
async function waitFor(predicate, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 2));
  }
}

function closeClient(lib, c) {
  if (lib.name === "ioredis") c.disconnect();
  else c.destroy ? c.destroy() : c.disconnect();
}

/** What happened, in order: { kind, value, at } (at: performance.now(), the lock's clock). */
class Record {
  constructor() {
    this.events = [];
    this.waiting = [];
  }

  add(kind, value = null) {
    this.events.push({ kind, value, at: performance.now() });
    for (const check of this.waiting.splice(0)) check();
  }

  of(kind) {
    return this.events.filter((e) => e.kind === kind);
  }

  /** The `count`-th event of `kind`, once it happened. */
  wait(kind, count = 1, ms = 15000) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`waiting for ${kind} number ${count}; seen ${this.events.map((e) => e.kind)}`)), ms);
      const check = () => {
        const found = this.of(kind);
        if (found.length >= count) {
          clearTimeout(timer);
          resolve(found[count - 1]);
        } else this.waiting.push(check);
      };
      check();
    });
  }
}

/**
 * election.run() in the background. Its work records `start` (the term) and returns at once if
 * `returns`; else it waits for its signal and records `stopped`. The election's resign() is
 * recorded as it is called.
 */
function runner(election, { returns = false, follow = true } = {}) {
  const rec = new Record();
  const stop = new AbortController();
  const resign = election.resign.bind(election);
  election.resign = () => {
    rec.add("resign");
    return resign();
  };
  const work = (signal) => {
    rec.add("start", election.term);
    if (returns) return undefined;
    return new Promise((resolve) => {
      const done = () => {
        rec.add("stopped", signal.reason);
        resolve();
      };
      if (signal.aborted) done();
      else signal.addEventListener("abort", done, { once: true });
    });
  };
  const opts = { signal: stop.signal, onElected: (term) => rec.add("elected", term) };
  if (follow) opts.onNewLeader = (leader) => rec.add("leader", leader);
  let run = null;
  const done = election.run(work, opts);
  run = election.running.run;
  return { rec, election, run, done, stop: async () => (stop.abort(), await done) };
}

for (const lib of LIBRARIES) {
  describe(`${lib.name}: election.run() and vacancy`, () => {
    const opened = [];
    const key = (k) => `${lib.name}:elrun:${k}`;
    let direct;
    let control;
    const locker = async (port = server.port) => {
      const client = await lib.connect(port);
      if (client.on) client.on("error", () => {});
      const made = new Locker(client);
      opened.push([made, client]);
      return made;
    };
    const waiters = async (name) => {
      const info = await control.info(name);
      return info ? info.waiters : 0;
    };
    let observeSupported;

    before(async () => {
      direct = await lib.connect(server.port);
      control = new Locker(direct);
      observeSupported = await control.supports("LOCK.OBSERVE");
    });
    after(async () => {
      for (const [made, client] of opened) {
        await made.quit();
        closeClient(lib, client);
      }
      await control.quit();
      await lib.close(direct);
    });

    test("observe() gives out null once when the leader resigns with no successor", { timeout: 30000 }, async (t) => {
      if (!observeSupported) return t.skip("needs LOCK.OBSERVE, which this server's module does not have");
      const rec = new Record();
      const stop = new AbortController();
      const watching = (async () => {
        for await (const change of (await locker()).election(key("vacant")).observe({ signal: stop.signal })) rec.add("change", change);
      })();
      watching.catch(() => {});
      const first = (await locker()).election(key("vacant"));
      const second = (await locker()).election(key("vacant"));
      const term = await first.campaign();
      assert.equal((await rec.wait("change", 1)).value.term, term);
      assert.equal(await first.resign(), true); // nobody waits: the lock is free
      assert.equal((await rec.wait("change", 2)).value, null);
      const later = await second.campaign();
      assert.equal((await rec.wait("change", 3)).value.term, later);
      assert.deepEqual(rec.of("change").map((e) => e.value && e.value.term), [term, null, later]);
      await second.resign();
      assert.equal((await rec.wait("change", 4)).value, null);
      stop.abort();
    });

    for (const how of ["client-kill", "key-deleted"]) {
      test(`run() aborts the work when leadership is lost (${how}) and campaigns again`, { timeout: 30000 }, async () => {
        const name = key(`lost-${how}`);
        const r = runner((await locker()).election(name, { leaseMs: LEASE }), { follow: false });
        try {
          const first = (await r.rec.wait("start")).value;
          if (how === "client-kill") await lib.call(direct, "CLIENT", "KILL", "ID", String((await control.info(name)).client));
          else await lib.call(direct, "DEL", name); // an operator: the next renewal finds the term gone
          await r.rec.wait("stopped");
          const second = (await r.rec.wait("start", 2)).value; // elected again, its work started again
          assert.ok(second > first);
        } finally {
          await r.stop();
        }
        const elected = r.rec.of("elected").map((e) => e.value);
        assert.deepEqual(elected, r.rec.of("start").map((e) => e.value)); // onElected once per term, then the work
        assert.equal(new Set(elected).size, elected.length);
        assert.equal(r.rec.of("stopped").length, elected.length); // each work ended once
        assert.equal(r.run.terms[0].why, LOST);
        assert.equal(r.run.terms.at(-1).why, STOPPED);
        assert.equal(r.rec.of("stopped")[0].value.name, "LockLostError");
        assert.ok(r.run.terms[0].firedAt <= r.rec.of("stopped")[0].at);
        assert.equal(await control.info(name), null); // the last term resigned
      });
    }

    test("a killed server aborts the work at the close, and the run goes on when it is back", { timeout: 30000 }, async () => {
      const own = await Server.start(); // a server of its own, killed with SIGKILL
      let back = null;
      let r = null;
      try {
        const made = await locker(own.port);
        // A lease of 30 s: the first renewal would come 10 s after the grant.
        r = runner(made.election(key("kill9"), { leaseMs: 30000 }), { follow: false });
        const started = (await r.rec.wait("start")).at;
        await own.stop(); // the term's socket closes with the server
        const stopped = (await r.rec.wait("stopped")).at;
        // Told by the close, long before a renewal could have found out (recorded clocks).
        assert.equal(r.run.terms[0].why, LOST);
        assert.ok(r.run.terms[0].firedAt <= stopped && stopped < started + 5000, `${started} ${stopped}`);
        back = await Server.start([], own.port); // the server comes back: the run campaigns again
        await r.rec.wait("start", 2);
      } finally {
        if (r) await r.stop();
        await own.stop(); // killed already unless the test failed before
        if (back) await back.stop();
      }
    });

    test("a successor starts only after its predecessor's signal aborted (stop)", { timeout: 30000 }, async (t) => {
      if (!observeSupported) return t.skip("needs LOCK.OBSERVE, which this server's module does not have");
      const name = key("handoff");
      const first = runner((await locker()).election(name, { data: "first" }));
      await first.rec.wait("start");
      const second = runner((await locker()).election(name, { data: "second" }));
      await waitFor(async () => (await waiters(name)) === 1);
      await second.rec.wait("leader"); // its observer saw the first leading
      await first.stop(); // its work is stopped, then its term resigned: the second is elected
      const { value: term, at: started } = await second.rec.wait("start");
      await second.rec.wait("leader", 2); // and then itself
      await second.stop();
      const [before] = first.run.terms;
      assert.equal(before.why, STOPPED);
      assert.ok(before.firedAt < first.rec.of("resign")[0].at && first.rec.of("resign")[0].at < started);
      const leaders = second.rec.of("leader").map((e) => e.value);
      assert.deepEqual(leaders.slice(0, 2).map((l) => l.term), [before.term, term]);
      assert.deepEqual(leaders.slice(0, 2).map((l) => String(l.data)), ["first", "second"]);
      assert.ok(leaders.length === 2 || (leaders.length === 3 && leaders[2] === null), String(leaders));
    });

    test("a work that returns hands over before the successor starts", { timeout: 30000 }, async () => {
      const name = key("returns");
      const holder = (await locker()).election(name);
      await holder.campaign();
      const first = runner((await locker()).election(name), { returns: true, follow: false });
      await waitFor(async () => (await waiters(name)) === 1);
      const second = runner((await locker()).election(name), { follow: false });
      await waitFor(async () => (await waiters(name)) === 2);
      await holder.resign(); // the first is elected, its work returns at once, it resigns: the second leads
      const { value: term, at: started } = await second.rec.wait("start");
      const firstTerm = first.run.terms[0];
      assert.equal(firstTerm.why, RETURNED);
      assert.ok(firstTerm.firedAt < first.rec.of("resign")[0].at && first.rec.of("resign")[0].at < started);
      assert.ok(firstTerm.term < term);
      await second.stop();
      await first.stop();
      assert.equal(second.rec.of("elected").length, 1);
    });

    test("a partitioned leader's work is aborted before its successor starts", { timeout: 30000 }, async () => {
      const name = key("cut");
      const proxy = await Proxy.start(server.port);
      try {
        const first = runner((await locker(proxy.port)).election(name, { leaseMs: LEASE }), { follow: false });
        await first.rec.wait("start");
        const hold = first.election.hold;
        const second = runner((await locker()).election(name), { follow: false });
        await waitFor(async () => (await waiters(name)) === 1);
        proxy.blackhole(); // the first's renewals go unanswered: its lease clock runs out
        const { at: started } = await second.rec.wait("start");
        await first.rec.wait("stopped");
        const [before] = first.run.terms;
        // Aborted at the lease's local end, before the server's: the successor, granted at the
        // server's end, starts after it (recorded clocks).
        assert.equal(before.why, LOST);
        assert.ok(hold.leaseEnd < started, `${hold.leaseEnd} < ${started}`);
        proxy.heal();
        await second.stop();
        await first.stop();
      } finally {
        proxy.heal();
        await proxy.close();
      }
    });
  });
}

test("a vacancy is given out once, and only after a leader", () => {
  const obs = new Observation();
  assert.equal(obs.answer([0, null]), undefined); // nobody led yet
  assert.deepEqual(obs.answer(["5", Buffer.from("a")]), { term: 5n, data: Buffer.from("a") });
  assert.equal(obs.answer(null), undefined);
  assert.equal(obs.answer([0, null]), null);
  assert.equal(obs.answer([0, null]), undefined); // the same vacancy, seen again
  assert.equal(obs.answer(["3", null]), undefined); // an older term (a failover)
  assert.deepEqual(obs.answer(["9", null]), { term: 9n, data: null });
});

test("a term aborts once, and a stopped run campaigns no more", () => {
  const run = new Run("el");
  const term = run.elected(5n, () => true);
  assert.ok(run.working(term) && run.campaigning());
  run.lost(term, new Error("gone"));
  run.stop();
  run.finished(term);
  assert.equal(term.why, LOST);
  assert.equal(term.signal.reason.message, "gone");
  assert.ok(!run.campaigning());
  const late = run.elected(6n, () => true); // granted as it stopped
  assert.ok(!run.working(late) && late.why === STOPPED && late.signal.aborted);
  const gone = new Run("el").elected(7n, () => false); // lost before it began
  assert.equal(gone.why, LOST);
});

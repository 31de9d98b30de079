// locker.election() against a real server, with ioredis and node-redis: a term is a fence and
// carries the candidate's data; candidates wait in the server, first come, first served, and each
// term is greater than the last; a leader whose process is killed is succeeded at once; a leader
// cut off from the server (the fault proxy) is signalled lost before its successor is granted;
// observers see every leader, in order, through reconnects. The observation's decisions are also
// driven here without a server. The observation tests need LOCK.OBSERVE in the server's module
// and are skipped without it.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const path = require("node:path");

const { Locker, Election, LockError, LockLostError, NotReplicatedError, UnsupportedError } = require("..");
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

/** Polls server state that no event announces (a candidate queued, a key gone). */
async function waitFor(predicate, ms = 5000) {
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

for (const lib of LIBRARIES) {
  describe(`${lib.name}: election`, () => {
    const opened = [];
    const key = (k) => `${lib.name}:el:${k}`;
    let direct;
    let control;
    // A locker of its own (its own connections, as another process would have).
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

    test("campaign() resolves with a term that LOCK.INFO shows with the data", async () => {
      const election = (await locker()).election(key("a"), { leaseMs: 10000, data: "10.0.0.5:8080" });
      assert.ok(election instanceof Election);
      assert.equal(election.isLeader, false);
      assert.equal(election.term, null);
      assert.equal(await election.leader(), null);
      const term = await election.campaign();
      assert.equal(typeof term, "bigint");
      assert.ok(election.isLeader && election.term === term && election.hold.leaseLeft > 9000);
      const info = await control.info(key("a"));
      assert.equal(info.fence, term);
      assert.equal(info.data, "10.0.0.5:8080");
      assert.notEqual(info.client, 0); // EPHEMERAL: bound to the connection that waited
      assert.deepEqual(await election.leader(), { term, data: Buffer.from("10.0.0.5:8080") });
      assert.equal(await election.campaign(), term); // leads already: the same term
      assert.equal(await election.resign(), true);
      assert.equal(election.isLeader, false);
      assert.equal(await control.info(key("a")), null);
      assert.equal(await election.resign(), false);
      assert.equal(election.signal.aborted, false); // a resigned term is not a lost one
    });

    test("a second candidate waits, and gets a higher term after resign()", async () => {
      const first = (await locker()).election(key("b"), { data: "first" });
      const second = (await locker()).election(key("b"), { data: "second" });
      const term = await first.campaign();
      assert.equal(await second.campaign({ wait: 0 }), null); // 0: does not wait
      assert.equal(await second.campaign({ wait: 100 }), null); // not elected within its wait
      const waiting = second.campaign({ wait: 5000 });
      await waitFor(async () => (await waiters(key("b"))) === 1);
      assert.equal(await first.resign(), true);
      const successor = await waiting;
      assert.ok(successor > term && second.isLeader && !first.isLeader);
      assert.deepEqual(await first.leader(), { term: successor, data: Buffer.from("second") });
      assert.equal(await second.resign(), true);
    });

    test("candidates are elected first come, first served", async () => {
      const leader = (await locker()).election(key("fifo"));
      const terms = [await leader.campaign()];
      const queued = await Promise.all([0, 1, 2].map(async (i) => (await locker()).election(key("fifo"), { data: `c${i}` })));
      const campaigns = [];
      for (const [i, candidate] of queued.entries()) {
        campaigns.push(candidate.campaign());
        await waitFor(async () => (await waiters(key("fifo"))) === i + 1);
      }
      await leader.resign();
      for (const [i, candidate] of queued.entries()) {
        terms.push(await campaigns[i]); // each is elected once the one before resigns
        assert.deepEqual((await candidate.leader()).data, Buffer.from(`c${i}`));
        await candidate.resign();
      }
      assert.deepEqual([...terms].sort((a, b) => (a < b ? -1 : 1)), terms);
      assert.equal(new Set(terms).size, 4);
    });

    test("a term is bound to a connection that no other wait of the locker uses", async () => {
      const shared = await locker();
      const holder = (await locker()).election(key("bound"));
      await holder.campaign();
      const first = shared.election(key("bound"));
      const elected = first.campaign();
      await waitFor(async () => (await waiters(key("bound"))) === 1);
      await holder.resign();
      await elected; // granted after a wait: bound to the connection that waited
      const bound = String((await control.info(key("bound"))).client);
      const controller = new AbortController();
      const second = shared.election(key("bound")).campaign({ signal: controller.signal });
      await waitFor(async () => (await waiters(key("bound"))) === 1);
      const blocked = String(await lib.call(direct, "CLIENT", "LIST"))
        .split("\n")
        .filter((l) => / cmd=lock\.acquire /.test(l) && / flags=\S*b/.test(l))
        .map((l) => l.match(/id=(\d+)/)[1]);
      assert.equal(blocked.length, 1);
      assert.notEqual(blocked[0], bound);
      controller.abort(new Error("enough"));
      await assert.rejects(second, /enough/);
      assert.ok(first.isLeader);
      assert.equal(String((await control.info(key("bound"))).client), bound);
      assert.equal(await first.resign(), true);
    });

    test("a signal ends a campaign's wait, and leaves no candidate queued", async () => {
      const leader = (await locker()).election(key("abort"));
      await leader.campaign();
      const candidate = (await locker()).election(key("abort"));
      const controller = new AbortController();
      const waiting = candidate.campaign({ signal: controller.signal });
      await waitFor(async () => (await waiters(key("abort"))) === 1);
      controller.abort(new Error("shutting down"));
      await assert.rejects(waiting, /shutting down/);
      assert.equal(await waiters(key("abort")), 0);
      assert.equal(candidate.isLeader, false);
      await leader.resign();
    });

    test("onLost is called with the election when the term is gone", async () => {
      const told = [];
      const election = (await locker()).election(key("gone"), { leaseMs: 300, onLost: (err, e) => told.push([err, e]) });
      await election.campaign();
      await control.send(["DEL", key("gone")], key("gone"), 1000, "del"); // an operator, an eviction
      await new Promise((resolve) => election.signal.addEventListener("abort", resolve, { once: true }));
      assert.equal(told.length, 1);
      assert.ok(told[0][0] instanceof LockLostError);
      assert.equal(told[0][1], election);
      assert.equal(election.isLeader, false);
      assert.equal(await election.resign(), false);
    });

    test("a term not acknowledged by the replicas asked for is not taken", async () => {
      const election = (await locker()).election(key("durable"), { replicas: 1, replicasTimeoutMs: 200 });
      await assert.rejects(election.campaign({ wait: 2000 }), (err) => err instanceof NotReplicatedError && err.released);
      assert.equal(election.isLeader, false);
      assert.equal(await control.info(key("durable")), null);
    });

    test("arguments are checked", async () => {
      const made = await locker();
      assert.throws(() => made.election(key("x"), { data: "" }), RangeError);
      assert.throws(() => made.election(key("x"), { data: Buffer.alloc(4097) }), RangeError);
      assert.throws(() => made.election(key("x"), { data: 7 }), TypeError);
      assert.throws(() => made.election(key("x"), { leaseMs: 0 }), RangeError);
      assert.throws(() => made.election(key("x"), { onLost: true }), TypeError);
      assert.throws(() => made.election(7), TypeError);
      assert.equal(made.election(key("x"), { data: "é".repeat(2048) }).data.length, 4096);
    });

    test("a killed leader (kill -9 of its process) is succeeded within 100 ms", async () => {
      const child = spawn(process.execPath, [path.join(__dirname, "election-child.js"), lib.name, String(server.port), key("kill")], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      try {
        const term = await new Promise((resolve, reject) => {
          child.stdout.once("data", (d) => resolve(BigInt(String(d).trim())));
          child.once("exit", (code) => reject(new Error(`the child exited (${code})`)));
        });
        assert.deepEqual(await control.election(key("kill")).leader(), { term, data: Buffer.from("child") });
        const successor = (await locker()).election(key("kill"));
        let grantedAt;
        const waiting = successor.campaign({ wait: 5000 }).then((t) => {
          grantedAt = performance.now();
          return t;
        });
        await waitFor(async () => (await waiters(key("kill"))) === 1);
        const killedAt = performance.now();
        child.kill("SIGKILL");
        const next = await waiting;
        assert.ok(next > term);
        assert.ok(grantedAt - killedAt < 100, `succeeded after ${(grantedAt - killedAt).toFixed(1)} ms`);
        await successor.resign();
      } finally {
        child.kill("SIGKILL");
      }
    });

    test("a partitioned leader is signalled lost before its successor is granted", async () => {
      const proxy = await Proxy.start(server.port);
      try {
        const at = {};
        let lost = 0;
        const leader = (await locker(proxy.port)).election(key("cut"), { leaseMs: LEASE, onLost: () => lost++ });
        const term = await leader.campaign();
        proxy.blackhole();
        at.partition = performance.now();
        const successor = (await locker()).election(key("cut"));
        const next = await successor.campaign({ wait: LEASE + 3000 });
        at.granted = performance.now();
        // The term's lease clock ran out before the successor was granted, within a lease of the
        // partition (its last renewal was sent before it); compared on the clock the client uses,
        // not on when the signal's callback ran.
        if (!leader.signal.aborted) await new Promise((resolve) => leader.signal.addEventListener("abort", resolve, { once: true }));
        at.leaseEnd = leader.hold.leaseEnd;
        assert.ok(at.leaseEnd < at.granted, JSON.stringify(at));
        assert.ok(at.leaseEnd - at.partition < LEASE, JSON.stringify(at));
        assert.ok(leader.signal.aborted && leader.signal.reason instanceof LockLostError);
        assert.equal(lost, 1);
        assert.equal(leader.isLeader, false);
        assert.ok(next > term);
        await successor.resign();
      } finally {
        proxy.heal();
        await proxy.close();
      }
    });

    test("observers see every leader in order through three changes and a reconnect", { timeout: 20000 }, async (t) => {
      if (!observeSupported) return t.skip("needs LOCK.OBSERVE, which this server's module does not have");
      const data = await lib.call(direct, "LOCK.ACQUIRE", key("probe"), "t", "PX", "1", "DATA", "x").then(() => true, () => false);
      const candidates = await Promise.all([0, 1, 2, 3].map(async (i) => (await locker()).election(key("obs"), data ? { data: `node-${i}` } : {})));
      const proxy = await Proxy.start(server.port);
      const stop = new AbortController();
      try {
        const observer = (await locker(proxy.port)).election(key("obs"));
        const seen = [];
        let arrived = () => {};
        const watching = (async () => {
          for await (const leader of observer.observe({ signal: stop.signal })) {
            seen.push(leader);
            arrived();
          }
        })();
        watching.catch(() => {});
        const nth = (n) =>
          Promise.race([
            new Promise((resolve) => {
              const check = () => (seen.length >= n ? resolve(seen[n - 1]) : (arrived = check));
              check();
            }),
            new Promise((_, reject) => setTimeout(() => reject(new Error(`waiting for leader ${n}; seen ${seen.length}`)), 5000)),
          ]);
        const terms = [await candidates[0].campaign()];
        assert.equal((await nth(1)).term, terms[0]);
        // 1: a handoff to a waiting candidate (one change: never "nobody" in between).
        const waiting = candidates[1].campaign();
        await waitFor(async () => (await waiters(key("obs"))) === 1);
        await candidates[0].resign();
        terms.push(await waiting);
        assert.equal((await nth(2)).term, terms[1]);
        // 2: made while the observer's connection is silent, which is then cut: the observer
        // reconnects and asks AFTER the fence it last saw, so it is told at once.
        proxy.blackhole();
        await candidates[1].resign();
        terms.push(await candidates[2].campaign());
        proxy.cut();
        proxy.heal();
        assert.equal((await nth(3)).term, terms[2]);
        // 3: a time without a leader ([0, nil]: null given out, once), then a new one.
        await candidates[2].resign();
        assert.equal(await nth(4), null);
        terms.push(await candidates[3].campaign());
        assert.equal((await nth(5)).term, terms[3]);
        const leaders = seen.filter((l) => l !== null);
        assert.equal(seen.length - leaders.length, 1);
        assert.deepEqual(leaders.map((l) => l.term), terms);
        assert.deepEqual([...terms].sort((a, b) => (a < b ? -1 : 1)), terms);
        assert.deepEqual(leaders.map((l) => l.data), candidates.map((c) => c.data));
        await candidates[3].resign();
        stop.abort(new Error("done observing"));
        await assert.rejects(watching, /done observing/);
      } finally {
        stop.abort();
        await proxy.close();
      }
    });

    test("an observation ends when the locker quits", { timeout: 20000 }, async (t) => {
      if (!observeSupported) return t.skip("needs LOCK.OBSERVE, which this server's module does not have");
      const made = await locker();
      const iterator = made.election(key("quit")).observe();
      const next = iterator.next(); // nobody leads: it waits in the server
      await waitFor(async () => String(await lib.call(direct, "CLIENT", "LIST")).includes("cmd=lock.observe"));
      const ended = assert.rejects(next, LockError);
      await made.quit();
      await ended;
    });

    test("observe() on a server without LOCK.OBSERVE rejects with UnsupportedError", async (t) => {
      if (observeSupported) return t.skip("this server's module has LOCK.OBSERVE");
      const iterator = (await locker()).election(key("none")).observe();
      await assert.rejects(iterator.next(), UnsupportedError);
    });
  });
}

test("an observation skips gaps, timeouts and older terms, and asks AFTER the fence last seen", () => {
  const obs = new Observation();
  const asked = [];
  const feed = (reply) => {
    asked.push(obs.args("el"));
    return obs.answer(reply);
  };
  assert.equal(feed([0, null]), undefined); // nobody leads, nobody led: nothing to give out
  assert.equal(feed(null), undefined); // the wait timed out
  assert.deepEqual(feed(["5", Buffer.from("a")]), { term: 5n, data: Buffer.from("a") });
  assert.equal(obs.failed(), 50); // a connection that failed: again after a pause, AFTER 5
  assert.equal(obs.failed(), 100);
  assert.equal(feed(["3", Buffer.from("old")]), undefined); // an older term (a failover lost a grant)
  assert.equal(feed(["5", Buffer.from("a")]), undefined); // seen before
  assert.deepEqual(feed(["9", null]), { term: 9n, data: null });
  assert.equal(obs.failed(), 50); // an answer resets the pauses
  assert.deepEqual(asked, [
    ["LOCK.OBSERVE", "el"],
    ["LOCK.OBSERVE", "el", "AFTER", "0", "SEEN", "", "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "0", "SEEN", "", "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", Buffer.from("a"), "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "3", "SEEN", Buffer.from("old"), "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", Buffer.from("a"), "BLOCK", 5000],
  ]);
});

// election.proclaim(data) against real servers, with ioredis and node-redis: the leader changes
// its data in the same term, and observers (observe(), which sends SEEN with the data it saw) see
// each value in order, after a reconnect (the fault proxy), and on a replica through a failover; a
// candidate that does not lead cannot proclaim. The decisions (the observation's, the re-grant's
// answer) are also driven here without a server.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");

const { Locker, LockLostError } = require("..");
const { Observation } = require("../observation");
const { outcome } = require("../proclaim");
const { Server, LIBRARIES, command, eventually } = require("./servers");
const { Proxy } = require("./proxy");

const LEASE = 1200;

/** Observes `election` into `seen`; nth(n) resolves with the n-th thing given out (5 s at most). */
function watch(election, signal) {
  const seen = [];
  let arrived = () => {};
  const watching = (async () => {
    for await (const leader of election.observe({ signal })) {
      seen.push(leader);
      arrived();
    }
  })();
  watching.catch(() => {});
  const until = (found, what) =>
    Promise.race([
      new Promise((resolve) => {
        const check = () => (found() ? resolve() : (arrived = check));
        check();
      }),
      new Promise((_, reject) => setTimeout(() => reject(new Error(`waiting for ${what}; seen ${seen.length}`)), 5000)),
    ]);
  const nth = async (n) => {
    await until(() => seen.length >= n, `leader ${n}`);
    return seen[n - 1];
  };
  const value = (term, data) => until(() => seen.some((l) => l && l.term === term && String(l.data) === data), `${term} ${data}`);
  return { seen, nth, value, watching };
}

const shown = (l) => (l === null ? null : [l.term, l.data === null ? null : String(l.data)]);

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

for (const lib of LIBRARIES) {
  describe(`${lib.name}: proclaim`, () => {
    const opened = [];
    const key = (k) => `${lib.name}:pr:${k}`;
    const locker = async (port = server.port) => {
      const client = await lib.connect(port);
      if (client.on) client.on("error", () => {});
      const made = new Locker(client);
      opened.push([made, client]);
      return made;
    };
    let seenSupported;
    before(async () => {
      seenSupported = await command(server.port, "LOCK.OBSERVE", "probe", "AFTER", "0", "SEEN", "").then(() => true, () => false);
    });
    after(async () => {
      for (const [made, client] of opened) {
        await made.quit();
        await lib.close(client);
      }
    });

    test("observers see each proclaimed value in order, and one made while cut off", { timeout: 30000 }, async (t) => {
      if (!seenSupported) return t.skip("needs LOCK.OBSERVE … SEEN");
      const proxy = await Proxy.start(server.port);
      const stop = new AbortController();
      try {
        const leader = (await locker()).election(key("obs"), { leaseMs: 10000, data: "v0" });
        const o = watch((await locker(proxy.port)).election(key("obs")), stop.signal);
        const term = await leader.campaign();
        assert.deepEqual(shown(await o.nth(1)), [term, "v0"]);
        for (const [n, v] of [[2, "v1"], [3, "v2"], [4, "v3"]]) {
          await leader.proclaim(v);
          assert.deepEqual(shown(await o.nth(n)), [term, v]);
        }
        assert.equal(leader.term, term);
        const info = await (await locker()).info(key("obs"));
        assert.deepEqual([info.fence, String(info.data)], [term, "v3"]);
        // Proclaimed while the observer's connection is silent, then cut: seen once it reconnects.
        proxy.blackhole();
        await leader.proclaim(Buffer.from("v4"));
        proxy.cut();
        proxy.heal();
        assert.deepEqual(shown(await o.nth(5)), [term, "v4"]);
        // The same value again is no change: the next thing seen is the one after it.
        await leader.proclaim("v4");
        await leader.proclaim("v5");
        assert.deepEqual(shown(await o.nth(6)), [term, "v5"]);
        await leader.resign();
        assert.equal(await o.nth(7), null);
        assert.ok((await leader.campaign()) > term);
        assert.equal(String((await leader.leader()).data), "v5", "later campaigns send the value proclaimed");
        await leader.resign();
      } finally {
        stop.abort();
        await proxy.close();
      }
    });

    test("only the leader can proclaim", { timeout: 30000 }, async (t) => {
      if (!seenSupported) return t.skip("needs LOCK.OBSERVE … SEEN");
      const candidate = (await locker()).election(key("only"), { leaseMs: 3000, data: "a" });
      await assert.rejects(candidate.proclaim("b"), (e) => e instanceof LockLostError && /does not lead/.test(e.message));
      await assert.rejects(candidate.proclaim(""), RangeError);
      await candidate.campaign();
      await candidate.resign();
      await assert.rejects(candidate.proclaim("b"), /does not lead/);
      // The term deleted under a leader whose lease clock still runs: the key is free, so the
      // re-grant would be a new term. It is not taken: released at once, and the term lost.
      await candidate.campaign();
      await command(server.port, "DEL", key("only"));
      await assert.rejects(candidate.proclaim("b"), (e) => e instanceof LockLostError && /lost/.test(e.message));
      assert.equal(await command(server.port, "EXISTS", key("only")), 0, "no new term left behind");
      assert.ok(candidate.signal.aborted && !candidate.isLeader);
      // The term's connection killed: lost, and proclaim refuses.
      await candidate.campaign();
      const info = await (await locker()).info(key("only"));
      await command(server.port, "CLIENT", "KILL", "ID", String(info.client));
      await eventually(async () => candidate.signal.aborted, 5000, "the loss");
      await assert.rejects(candidate.proclaim("b"), LockLostError);
    });

    test("a replica's observer sees each value through a failover", { timeout: 30000 }, async (t) => {
      if (!seenSupported) return t.skip("needs LOCK.OBSERVE … SEEN");
      const master = await Server.start(["--repl-diskless-sync-delay", "0"]);
      const replica = await Server.start();
      const stop = new AbortController();
      try {
        await command(replica.port, "REPLICAOF", "127.0.0.1", String(master.port));
        await eventually(async () => (await command(replica.port, "INFO", "replication")).includes("master_link_status:up"), 10000, "the replica in sync");
        const old = (await locker(master.port)).election(key("fo"), { leaseMs: LEASE, data: "m1" });
        const next = (await locker(replica.port)).election(key("fo"), { leaseMs: 10000, data: "r1" });
        const term = await old.campaign();
        const o = watch((await locker(replica.port)).election(key("fo")), stop.signal);
        await o.value(term, "m1");
        await old.proclaim("m2");
        await o.value(term, "m2"); // the master's re-grant, replicated
        // The master dies; the replica is promoted, keeps the term until its lease ends, then
        // grants the next to the candidate waiting there.
        await master.stop();
        await eventually(async () => old.signal.aborted, LEASE * 3, "the old leader's loss");
        await command(replica.port, "REPLICAOF", "NO", "ONE");
        await assert.rejects(old.proclaim("m3"), LockLostError);
        const newTerm = await next.campaign({ wait: LEASE * 5 });
        assert.ok(newTerm > term);
        await o.value(newTerm, "r1");
        await next.proclaim("r2");
        await o.value(newTerm, "r2");
        await next.resign();
        const leaders = o.seen.filter((l) => l !== null).map(shown);
        assert.deepEqual(leaders, [[term, "m1"], [term, "m2"], [newTerm, "r1"], [newTerm, "r2"]]);
      } finally {
        stop.abort();
        await master.stop();
        await replica.stop();
      }
    });
  });
}

test("an observation gives out each new value of the term and sends SEEN with the data it saw", () => {
  const obs = new Observation();
  const asked = [];
  const feed = (reply) => {
    asked.push(obs.args("el"));
    return shown(obs.answer(reply) ?? null);
  };
  assert.deepEqual(feed(["5", "a"]), [5n, "a"]);
  assert.deepEqual(feed(["5", Buffer.from("b")]), [5n, "b"]); // a new value of term 5
  assert.equal(feed(["5", "b"]), null); // seen already (a reconnect's first answer)
  assert.equal(feed(["3", "old"]), null); // an older term after a failover
  assert.deepEqual(feed(["5", null]), [5n, null]); // the data dropped: a new value too
  assert.deepEqual(asked.slice(1), [
    ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", Buffer.from("a"), "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", Buffer.from("b"), "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", Buffer.from("b"), "BLOCK", 5000],
    ["LOCK.OBSERVE", "el", "AFTER", "3", "SEEN", Buffer.from("old"), "BLOCK", 5000],
  ]);
  assert.deepEqual(obs.args("el"), ["LOCK.OBSERVE", "el", "AFTER", "5", "SEEN", "", "BLOCK", 5000]);
  // The vacated term again (an older replica's) is not given out; a server without SEEN is
  // observed by fence alone.
  assert.equal(feed([0, null]), null);
  assert.equal(feed(["5", "c"]), null);
  assert.ok(obs.refusedSeen("ERR syntax error: unknown option 'SEEN' (LOCK.OBSERVE takes AFTER and BLOCK)"));
  assert.ok(!obs.refusedSeen("ERR syntax error: unknown option 'SEEN'"), "once");
  assert.deepEqual(obs.args("el"), ["LOCK.OBSERVE", "el", "AFTER", "5", "BLOCK", 5000]);
});

test("a re-grant's answer: the term kept, lost, or a new grant to give back", () => {
  assert.equal(outcome({ token: "t", fence: 7n }, 7n), "kept");
  assert.equal(outcome(null, 7n), "lost");
  assert.equal(outcome({ token: "t", fence: 9n }, 7n), "taken");
});

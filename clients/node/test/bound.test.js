// Holds bound to a connection (EPHEMERAL locks, election terms, multi-key locks with `ephemeral`)
// against a real server, with ioredis and node-redis: each lives on a connection the locker opens
// for it alone and closes when it ends; a CLIENT KILL of it is signalled at once (not at the next
// renewal), onLost runs once per loss, the server's `timeout` and the application's own timeouts
// never end it (nor a wait for a plain lock, which the locker bounds itself). Times are compared on the clock the client uses (performance.now()).
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");
const net = require("node:net");
const path = require("node:path");
const { spawn } = require("node:child_process");

const { Locker, LockLostError } = require("..");
const { Server, LIBRARIES, eventually } = require("./servers");

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  if (server) await server.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms)); // elapsed time itself is what is tested
const aborted = (signal) => new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", resolve, { once: true })));
const sockets = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;

/** The application's client with options of its own (timeouts) on top of the test's. */
async function connectWith(lib, port, extra) {
  if (lib.name === "ioredis") {
    const Redis = require("ioredis");
    const c = new Redis({ host: "127.0.0.1", port, ...extra.ioredis });
    c.on("error", () => {});
    await c.ping();
    return c;
  }
  const { createClient } = require("redis");
  const c = createClient({ socket: { host: "127.0.0.1", port, ...extra.socket } });
  c.on("error", () => {});
  await c.connect();
  return c;
}

function disconnect(lib, c) {
  if (lib.name === "ioredis") c.disconnect();
  else c.destroy ? c.destroy() : c.disconnect();
}

for (const lib of LIBRARIES) {
  describe(`${lib.name}: holds bound to a connection`, () => {
    let client;
    let locker;
    let direct;
    const key = (k) => `${lib.name}:b:${k}`;
    const ids = async () => [...String(await lib.call(direct, "CLIENT", "LIST")).matchAll(/^id=(\d+) /gm)].map((m) => m[1]);
    const boundTo = async (name) => String((await locker.info(name)).client);

    before(async () => {
      client = await lib.connect(server.port);
      client.on("error", () => {});
      locker = new Locker(client);
      direct = await lib.connect(server.port);
      await locker.info(key("warm")); // the locker's own connection is open
    });
    after(async () => {
      await locker.quit();
      await lib.close(client);
      await lib.close(direct);
    });

    // Each kind of bound hold, taken without waiting and after a wait: { hold, end(), names }.
    const kinds = {
      lock: async (name, leaseMs, onLost, wait = 0) => {
        const hold = await locker.acquire(name, leaseMs, { ephemeral: true, onLost, wait });
        hold.renewEvery(leaseMs);
        return { hold, names: [name], end: () => hold.release() };
      },
      multi: async (name, leaseMs, onLost, wait = 0) => {
        const names = [`{${name}}:a`, `{${name}}:b`];
        const hold = await locker.acquire(names, leaseMs, { ephemeral: true, onLost, wait });
        hold.renewEvery(leaseMs);
        return { hold, names, end: () => hold.release() };
      },
      election: async (name, leaseMs, onLost, wait = 0) => {
        const election = locker.election(name, { leaseMs, onLost });
        await election.campaign({ wait: wait || Infinity });
        return { hold: election.hold, names: [name], end: () => election.resign(), election };
      },
    };

    test("each lives on a connection of its own, which is closed when it ends", async () => {
      const before = await ids();
      const socketsBefore = sockets();
      for (const [kind, take] of Object.entries(kinds)) {
        for (const waited of [false, true]) {
          const name = key(`own-${kind}-${waited}`);
          let blocker = null;
          if (waited) blocker = await locker.acquire(kind === "multi" ? `{${name}}:b` : name, 10000);
          const taking = take(name, 10000, undefined, waited ? 5000 : 0);
          if (blocker) {
            await eventually(async () => ((await locker.info(blocker.name)) || {}).waiters === 1, 5000, "the wait queued");
            await blocker.release();
          }
          const { hold, names, end } = await taking;
          const id = await boundTo(names[0]);
          for (const n of names) assert.equal(await boundTo(n), id, `${kind}: every key bound to one connection`);
          assert.equal(id, hold.bound.id);
          assert.ok(!before.includes(id), `${kind}: bound to a connection opened for it (${id} is not in ${before})`);
          await end();
          assert.equal(await locker.info(names[0]), null);
          assert.ok(!(await ids()).includes(id), `${kind}: its connection closed when it ended`);
        }
      }
      assert.deepEqual((await ids()).sort(), before.sort(), "no connection left behind");
      assert.equal(sockets(), socketsBefore, "no socket left open in this process");
    });

    test("CLIENT KILL of the bound connection: lost at once, before the lease end, onLost once", { timeout: 20000 }, async () => {
      const LEASE = 3000;
      await Promise.all(
        Object.entries(kinds).map(async ([kind, take]) => {
          const calls = [];
          const { hold, names, election } = await take(key(`kill-${kind}`), LEASE, (err) => calls.push(err));
          const id = await boundTo(names[0]);
          const leaseEnd = hold.leaseEnd;
          const killedAt = performance.now();
          await lib.call(direct, "CLIENT", "KILL", "ID", id);
          await aborted(hold.signal);
          const lostAt = performance.now();
          const at = JSON.stringify({ kind, killedAt, lostAt, leaseEnd });
          assert.ok(hold.signal.reason instanceof LockLostError);
          assert.match(hold.signal.reason.message, /connection the hold is bound to closed/, at);
          // Told by the socket, not by a renewal (due a third of the lease after the last one).
          assert.ok(lostAt - killedAt < LEASE / 3, at);
          assert.ok(lostAt < leaseEnd - LEASE / 2, at);
          assert.equal(hold.leaseLeft, 0);
          if (election) assert.equal(election.isLeader, false);
          for (const n of names) assert.equal(await locker.info(n), null, "released by the server at once");
          // Past the old lease end and a renewal's time: nothing more is signalled.
          await sleep(leaseEnd - performance.now() + 200);
          assert.equal(calls.length, 1, `${kind}: onLost ran ${calls.length} times`);
          assert.equal(calls[0], hold.signal.reason);
          if (election) assert.equal(await election.resign(), false);
          else assert.equal(await hold.release(), false);
        }),
      );
    });

    test("a renewal that finds the hold gone: onLost once, not again at the old lease end", { timeout: 20000 }, async () => {
      const LEASE = 900;
      const plain = async (name, leaseMs, onLost) => {
        const hold = await locker.acquire(name, leaseMs, { onLost });
        hold.renewEvery(leaseMs);
        return { hold, names: [name] };
      };
      await Promise.all(
        Object.entries({ ...kinds, plain }).map(async ([kind, take]) => {
          const calls = [];
          const { hold, names } = await take(key(`gone-${kind}`), LEASE, (err) => calls.push(err));
          const leaseEnd = hold.leaseEnd;
          await lib.call(direct, "DEL", ...names); // an operator, an eviction
          await aborted(hold.signal);
          assert.match(hold.signal.reason.message, /no longer held/, kind);
          await sleep(Math.max(leaseEnd, hold.leaseSent + LEASE) - performance.now() + 200);
          assert.equal(calls.length, 1, `${kind}: onLost ran ${calls.length} times`);
        }),
      );
    });

    test("CONFIG SET timeout 3: a leader with a longer lease stays leader over several timeouts", { timeout: 40000 }, async () => {
      const calls = [];
      // Renewed every 4 s: without anything else sent, the server would close its connection.
      const election = locker.election(key("idle"), { leaseMs: 12000, onLost: (err) => calls.push(err) });
      const term = await election.campaign();
      const id = await boundTo(key("idle"));
      // Three seconds: the keep-alive's second, and two more for a busy machine's stalls.
      await lib.call(direct, "CONFIG", "SET", "timeout", "3");
      try {
        for (let i = 0; i < 2; i++) {
          // An idle connection of the test's is closed by the server: a timeout has passed.
          const idle = net.connect(server.port, "127.0.0.1");
          idle.on("error", () => {});
          await new Promise((resolve) => idle.once("close", resolve));
        }
        assert.equal(calls.length, 0, String(calls[0]));
        assert.equal(election.isLeader, true);
        assert.equal(election.term, term);
        assert.equal(await boundTo(key("idle")), id, "the same connection");
      } finally {
        await lib.call(direct, "CONFIG", "SET", "timeout", "0");
      }
      assert.equal(await election.resign(), true);
    });

    test("the application's own timeouts do not touch a term: its wait, its renewals, its connection", { timeout: 20000 }, async () => {
      const app = await connectWith(lib, server.port, { ioredis: { commandTimeout: 150, socketTimeout: 300 }, socket: { socketTimeout: 300 } });
      const own = new Locker(app);
      try {
        const calls = [];
        const first = locker.election(key("app"));
        await first.campaign();
        const candidate = own.election(key("app"), { leaseMs: 1500, onLost: (err) => calls.push(err) });
        const waiting = candidate.campaign({ wait: 10000 });
        await eventually(async () => (await locker.info(key("app"))).waiters === 1, 5000, "the candidate queued");
        await sleep(600); // the wait lasts longer than the application's timeouts
        await first.resign();
        const term = await waiting;
        const id = await boundTo(key("app"));
        // The application's own command times out meanwhile (ioredis), its idle connection is
        // closed by its socket timeout (node-redis): the term is not the application's.
        if (lib.name === "ioredis") await assert.rejects(app.call("BLPOP", key("nothing"), "1"), /timed out/i);
        await sleep(1200); // several renewals and several of the application's timeouts
        assert.equal(calls.length, 0, String(calls[0]));
        assert.equal(candidate.term, term);
        assert.equal(await boundTo(key("app")), id, "the same connection");
        assert.equal(await candidate.resign(), true);
      } finally {
        await own.quit();
        disconnect(lib, app);
      }
    });

    test("the application's own timeouts do not end a wait for a lock: the locker bounds it itself", { timeout: 20000 }, async () => {
      const app = await connectWith(lib, server.port, { ioredis: { commandTimeout: 150, socketTimeout: 300 }, socket: { socketTimeout: 300 } });
      const own = new Locker(app);
      try {
        const hold = await locker.acquire(key("wait"), 10000);
        const waiting = own.acquire(key("wait"), 10000, { wait: 10000 });
        await eventually(async () => (await locker.info(key("wait"))).waiters === 1, 5000, "the waiter queued");
        await sleep(600); // the wait lasts longer than the application's timeouts
        assert.equal((await locker.info(key("wait"))).waiters, 1, "still waiting");
        await hold.release();
        const granted = await waiting;
        assert.ok(granted.fence > hold.fence);
        assert.equal(await granted.release(), true);
      } finally {
        await own.quit();
        disconnect(lib, app);
      }
    });

    test("a process that took and ended bound holds exits by itself", { timeout: 20000 }, async () => {
      const child = spawn(process.execPath, [path.join(__dirname, "bound-child.js"), lib.name, String(server.port), key("child")], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      const watchdog = setTimeout(() => child.kill("SIGKILL"), 10000); // still running: something kept it alive
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      const code = await new Promise((resolve) => child.once("exit", resolve));
      clearTimeout(watchdog);
      assert.equal(code, 0, `the child did not exit by itself: ${out}`);
      assert.match(out, /done/);
    });
  });
}

// The bound connection's decisions, driven without a server: a stand-in connection that the test
// closes, and a stand-in locker that records what is sent through it.
describe("a bound connection, without a server", () => {
  const { Bound } = require("../bound");
  const { EventEmitter } = require("node:events");
  const standIn = () => {
    const conn = new EventEmitter();
    conn.alive = true;
    conn.id = "7";
    conn.sent = [];
    conn.onClose = (fn) => {
      let told = false;
      const tell = (why) => {
        if (!told) (told = true), fn(why);
      };
      conn.once("close", () => tell("the socket closed"));
      conn.once("end", () => tell("the connection ended"));
    };
    const lent = { conn, dropped: 0, call: async (args) => (conn.sent.push(args), "1"), drop: () => lent.dropped++ };
    const locker = { sent: [], conns: { cluster: false }, send: async (args) => (locker.sent.push(args), "0") };
    return { conn, lent, locker };
  };

  test("a close is told once, to every listener; a close of its own is told to none", async () => {
    const { conn, lent, locker } = standIn();
    const bound = new Bound(locker, lent);
    const told = [];
    bound.onClose((why) => told.push(why));
    conn.emit("close");
    conn.emit("end");
    assert.deepEqual(told, ["the socket closed"]);
    assert.equal(lent.dropped, 1);
    const late = await new Promise((resolve) => bound.onClose(resolve)); // after the close: told at once
    assert.equal(late, "the socket closed");
    const own = standIn();
    const closed = new Bound(own.locker, own.lent);
    closed.onClose((why) => told.push(why));
    closed.close();
    own.conn.emit("close");
    assert.equal(told.length, 1);
  });

  test("commands go on the connection while it is open, then to the locker", async () => {
    const { conn, lent, locker } = standIn();
    const bound = new Bound(locker, lent);
    assert.equal(await bound.send(["LOCK.EXTEND", "k", "t", "PX", 1000], "k", 1000, "extend"), "1");
    conn.emit("close");
    assert.equal(await bound.send(["LOCK.RELEASE", "k", "t"], "k", 1000, "release"), "0");
    assert.deepEqual(conn.sent, [["LOCK.EXTEND", "k", "t", "PX", 1000]]);
    assert.deepEqual(locker.sent, [["LOCK.RELEASE", "k", "t"]]);
  });

  test("a connection silent for KEEPALIVE_MS sends a PING", async () => {
    const { KEEPALIVE_MS, keepAliveAt } = require("../bound");
    assert.equal(keepAliveAt(100), 100 + KEEPALIVE_MS);
    assert.ok(KEEPALIVE_MS <= 1000, "within the shortest server timeout (1 s)");
    const { conn, lent, locker } = standIn();
    const bound = new Bound(locker, lent);
    const started = performance.now();
    const ping = await new Promise((resolve) => (lent.call = async (args) => (resolve({ args, at: performance.now() }), "PONG")));
    assert.deepEqual(ping.args, ["PING"]);
    assert.ok(ping.at - started >= KEEPALIVE_MS - 5, `a PING after ${ping.at - started} ms`);
    bound.close();
    conn.emit("close");
  });
});

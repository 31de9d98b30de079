// Durable grants on a real master and replica (`replicas`, `aofLocal`, `aofReplicas`), with
// ioredis and node-redis. The replica is stopped with SIGSTOP (Server.stopped) where a test needs
// it not to acknowledge, as a replica asleep in DEBUG SLEEP but from a moment the test knows. Each
// test starts once the replica has acknowledged a write of the master (right after a full sync,
// or a stop, the first acknowledgement can take about a second).
"use strict";

const { test, describe, before, after, beforeEach } = require("node:test");
const assert = require("node:assert/strict");

const { Locker, LockError, NotReplicatedError, UnsupportedError } = require("..");
const { Server, LIBRARIES, command, pipeline, eventually } = require("./servers");

// A master with AOF (fsync always: WAITAOF answers at once) and a replica of it.
const AOF = ["--appendonly", "yes", "--appendfsync", "always"];

let master;
let replica;
let plain; // a server without AOF
let hasWaitaof;
before(async () => {
  master = await Server.start(["--repl-diskless-sync-delay", "0", ...AOF]);
  replica = await Server.start(["--replicaof", "127.0.0.1", String(master.port), ...AOF]);
  plain = await Server.start();
  hasWaitaof = await command(master.port, "WAITAOF", "0", "0", "1").then(() => true, (e) => (assert.match(e.message, /unknown command/), false));
});
after(async () => {
  for (const s of [replica, master, plain]) if (s) await s.stop();
});

/** A write of the master acknowledged by the replica (WAIT on the connection that wrote). */
async function acknowledged() {
  const deadline = Date.now() + 20000;
  for (;;) {
    const [, acks] = await pipeline(master.port, ["SET", "durable:probe", "1"], ["WAIT", "1", "1000"]);
    if (acks === 1) return;
    if (Date.now() > deadline) throw new Error("the replica does not acknowledge");
  }
}

async function calls(port, name) {
  const stats = await command(port, "INFO", "commandstats");
  const m = stats.match(new RegExp(`cmdstat_${name.replace(".", "\\.")}:calls=(\\d+)`));
  return m ? Number(m[1]) : 0;
}

const info = (port, name) => command(port, "LOCK.INFO", name);
async function waiters(port, name) {
  const reply = await info(port, name);
  return reply ? reply[reply.indexOf("waiters") + 1] : 0;
}
const settledWithin = (promise, ms) =>
  Promise.race([promise.then(() => true, () => true), new Promise((r) => setTimeout(() => r(false), ms))]);

for (const lib of LIBRARIES) {
  describe(lib.name, () => {
    let client;
    let locker;
    before(async () => {
      client = await lib.connect(master.port);
      locker = new Locker(client);
    });
    after(async () => {
      await locker.quit();
      await lib.close(client);
    });
    beforeEach(async () => {
      await command(master.port, "FLUSHALL");
      await acknowledged();
    });
    const key = (k) => `${lib.name}:durable:${k}`;

    test("a grant is reported once the replica has it", async () => {
      let acquiring;
      await replica.stopped(async () => {
        acquiring = locker.acquire(key("a"), 10000, { replicas: 1, replicasTimeoutMs: 5000 });
        assert.equal(await settledWithin(acquiring, 300), false, "acquire settled before the replica had the grant");
      });
      const hold = await acquiring;
      const onReplica = await info(replica.port, key("a")); // right away, on the replica
      assert.ok(onReplica && onReplica.includes(hold.token));
      await hold.release();
    });

    test("a grant the replica does not acknowledge is released", async () => {
      for (const ephemeral of [false, true]) {
        await replica.stopped(async () => {
          const started = Date.now();
          const err = await locker.acquire(key("b"), 10000, { replicas: 1, replicasTimeoutMs: 250, ephemeral }).then(
            () => assert.fail("granted without the replica"),
            (e) => e,
          );
          const took = Date.now() - started;
          assert.ok(err instanceof NotReplicatedError && err instanceof LockError, String(err));
          assert.ok(took >= 250 && took < 250 + 1500, `took ${took} ms`);
          assert.equal(err.released, true);
          assert.equal(err.replicas, 0);
          assert.equal(err.needed, 1);
          assert.equal(await info(master.port, key("b")), null); // no hold left
        });
        await acknowledged();
        // The replica is back: granted and acknowledged (a generous timeout on a loaded machine).
        const hold = await locker.acquire(key("b"), 10000, { replicas: 1, replicasTimeoutMs: 5000, ephemeral });
        await hold.release();
      }
    });

    test("a waited grant is waited for on its own connection", async () => {
      // The handoff's write is made in the holder's LOCK.RELEASE; the waiter's WAIT, on the
      // connection that waited, must count it: with the replica stopped it counts 0.
      for (const stop of [true, false]) {
        await command(master.port, "LOCK.ACQUIRE", key("c"), "holder", "PX", "10000");
        const replicasTimeoutMs = stop ? 250 : 5000; // the acknowledged grant: generous on a loaded machine
        const waiting = locker.acquire(key("c"), 10000, { wait: 10000, replicas: 1, replicasTimeoutMs });
        waiting.catch(() => {});
        await eventually(async () => (await waiters(master.port, key("c"))) === 1, 5000, "the waiter queued");
        const handOff = async () => {
          await command(master.port, "LOCK.RELEASE", key("c"), "holder");
          return waiting.then((hold) => hold, (e) => e);
        };
        if (stop) {
          const err = await replica.stopped(handOff);
          assert.ok(err instanceof NotReplicatedError, String(err));
          assert.equal(await info(master.port, key("c")), null);
          await acknowledged();
        } else {
          const hold = await handOff();
          assert.ok(!(hold instanceof Error), String(hold));
          await hold.release();
        }
      }
    });

    test("replicas 0 sends no WAIT", async () => {
      const before = await calls(master.port, "wait");
      const extends0 = await calls(master.port, "lock.extend");
      // A lease long enough that a loaded machine still renews it in time (every third of it).
      await locker.using(key("d"), 1500, async () => {
        await eventually(async () => (await calls(master.port, "lock.extend")) >= extends0 + 2, 10000, "two renewals");
      });
      const hold = await locker.acquire(key("d"), 5000);
      await hold.extend(5000);
      await hold.release();
      assert.equal(await calls(master.port, "wait"), before);
      const durable = await locker.acquire(key("d"), 5000, { replicas: 1 });
      await durable.extend(5000);
      await durable.release();
      assert.equal(await calls(master.port, "wait"), before + 2); // the grant's and the extension's
    });

    test("a renewal not acknowledged does not move the lease clock", async () => {
      await locker.using(key("e"), 900, { replicas: 1, replicasTimeoutMs: 50 }, async (signal, hold) => {
        const extends0 = await calls(master.port, "lock.extend");
        await replica.stopped(async () => {
          const left = hold.leaseLeft;
          await new Promise((r) => setTimeout(r, 450)); // a renewal comes due (every 300 ms), unacknowledged
          assert.ok((await calls(master.port, "lock.extend")) > extends0); // sent, applied by the master …
          assert.ok(hold.leaseLeft < left - 350, `${hold.leaseLeft} of ${left}`); // … but not counted
        });
        // The next renewal is acknowledged: the clock moves again.
        await eventually(async () => {
          assert.equal(signal.aborted, false);
          return hold.leaseLeft >= 600;
        }, 2000, "an acknowledged renewal");
        await replica.stopped(async () => {
          // Renewals sent meanwhile, applied by the master but not acknowledged, leave the lease
          // clock's end where it was; the hold is lost there (compared on the client's clock, not
          // on when the signal's callback ran).
          const end = hold.leaseEnd;
          await eventually(async () => signal.aborted, 3000, "the loss at the lease end");
          assert.equal(hold.leaseEnd, end);
          assert.match(signal.reason.message, /no renewal was answered before the lease ran out/);
          assert.notEqual(await info(master.port, key("e")), null); // the master renewed it
        });
      });
      assert.equal(await info(master.port, key("e")), null); // released by using()
    });

    test("extend not acknowledged rejects and keeps the hold", async () => {
      const hold = await locker.acquire(key("f"), 5000, { replicas: 1, replicasTimeoutMs: 100 });
      await replica.stopped(async () => {
        const left = hold.leaseLeft;
        await assert.rejects(hold.extend(60000), NotReplicatedError);
        assert.ok(hold.leaseLeft <= left);
        assert.equal(hold.signal.aborted, false);
        assert.ok(await hold.owned());
      });
      await hold.release();
    });

    test("WAITAOF where the server has it", async (t) => {
      if (!hasWaitaof) return t.skip("no WAITAOF on this server (Redis before 7.2): see the next test");
      const before = await calls(master.port, "waitaof");
      // A replica's fsync can be acknowledged a second or two late (it reports its fsync at
      // the next ask or once a second): a timeout of 3 s for the grant that must succeed.
      const hold = await locker.acquire(key("g"), 10000, { aofLocal: true, aofReplicas: 1, replicasTimeoutMs: 3000 });
      await hold.release();
      assert.ok((await calls(master.port, "waitaof")) >= before + 1);
      await replica.stopped(async () => {
        const opts = { aofLocal: true, aofReplicas: 1, replicasTimeoutMs: 250 };
        const err = await locker.acquire(key("g"), 10000, opts).then(() => assert.fail("granted"), (e) => e);
        assert.ok(err instanceof NotReplicatedError, String(err));
        assert.equal(err.local, 1);
        assert.equal(err.replicas, 0);
        assert.equal(await info(master.port, key("g")), null);
        const local = await locker.acquire(key("g"), 10000, { aofLocal: true, replicasTimeoutMs: 250 });
        await local.release(); // the master's own fsync needs no replica
      });
    });

    test("WAITAOF where the server lacks it or appendonly is off", async () => {
      // A server without AOF: nothing is taken, and the error says why.
      const other = await lib.connect(plain.port);
      const plainLocker = new Locker(other);
      try {
        const before = await calls(plain.port, "lock.acquire");
        await assert.rejects(
          plainLocker.acquire(key("h"), 10000, { aofLocal: true, aofReplicas: 1 }),
          (e) => e instanceof UnsupportedError && (hasWaitaof ? /appendonly/ : /WAITAOF/).test(e.message),
        );
        assert.equal(await calls(plain.port, "lock.acquire"), before);
      } finally {
        await plainLocker.quit();
        await lib.close(other);
      }
    });

    test("the options are checked", async () => {
      for (const bad of [-1, 1.5, "1", true]) {
        await assert.rejects(locker.acquire(key("i"), 1000, { replicas: bad }), /replicas/);
        await assert.rejects(locker.acquire(key("i"), 1000, { aofReplicas: bad }), /aofReplicas/);
      }
      await assert.rejects(locker.acquire(key("i"), 1000, { replicas: 1, replicasTimeoutMs: 0 }), RangeError);
      await assert.rejects(locker.acquire(key("i"), 1000, { aofLocal: "yes" }), TypeError);
      assert.equal(await info(master.port, key("i")), null);
    });
  });
}

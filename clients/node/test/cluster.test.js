// The locker on a Redis Cluster (three masters, each with a replica), with ioredis's Cluster and
// node-redis's createCluster at their default settings: the same Locker object through a slot
// migration (MOVED, ASK, TRYAGAIN; a wait moved to the new node within its timeout) and after a
// master is killed and its replica promoted.
"use strict";

const { test, describe, before, after } = require("node:test");
const assert = require("node:assert/strict");

const { Locker, NotReplicatedError } = require("..");
const { Cluster, command, pipeline, eventually } = require("./servers");

let cluster;
before(async () => {
  cluster = await Cluster.start();
});
after(async () => {
  if (cluster) await cluster.stop();
});

const LIBRARIES = [
  {
    name: "ioredis",
    async connect(port) {
      const { Cluster: IoCluster } = require("ioredis");
      const c = new IoCluster([{ host: "127.0.0.1", port }]);
      c.on("error", () => {});
      await new Promise((resolve) => c.once("ready", resolve));
      return c;
    },
    close: (c) => c.disconnect(),
  },
  {
    name: "node-redis",
    async connect(port) {
      const { createCluster } = require("redis");
      const c = createCluster({ rootNodes: [{ socket: { host: "127.0.0.1", port } }] });
      c.on("error", () => {});
      await c.connect();
      return c;
    },
    close: (c) => c.destroy(),
  },
];

/** LOCK.INFO of `name` on one node (with ASKING: the importing node answers too), as an object. */
async function infoAt(node, name) {
  const [, reply] = await pipeline(node.port, ["ASKING"], ["LOCK.INFO", name]);
  if (reply === null || reply instanceof Error) return reply;
  const info = {};
  for (let i = 0; i < reply.length; i += 2) info[reply[i]] = reply[i + 1];
  return info;
}

const alive = (node) => node.proc.exitCode === null && node.proc.signalCode === null;

/** A name whose slot `masters[index]` served when the cluster started. */
async function nameOn(index, prefix) {
  const ranges = [[0, 5460], [5461, 10922], [10923, 16383]][index];
  for (let i = 0; ; i++) {
    const name = `{${prefix}${i}}lock`;
    const slot = await command(cluster.masters.find(alive).port, "CLUSTER", "KEYSLOT", name);
    if (slot >= ranges[0] && slot <= ranges[1]) return { name, slot };
  }
}

for (const [index, lib] of LIBRARIES.entries()) {
  // `make test` runs these on the first and last server of its matrix (scripts/matrix.sh); the
  // locker's Cluster handling does not depend on the server's version.
  const skip = process.env.REDISLOCK_SKIP_CLUSTER ? "REDISLOCK_SKIP_CLUSTER is set" : false;
  describe(`${lib.name} Cluster`, { skip }, () => {
    let client;
    let locker;
    before(async () => {
      client = await lib.connect(cluster.masters.find(alive).port);
      locker = new Locker(client);
    });
    after(async () => {
      await locker.quit();
      await lib.close(client);
    });

    test("through a slot migration: MOVED, ASK, and a wait moved to the new node", async () => {
      const { name, slot } = await nameOn(index, `${lib.name}:m`);
      const neighbour = name.replace("lock", "other"); // same slot, not on the source
      const source = await cluster.masterOf(slot);
      const target = cluster.masters.find((m) => m !== source && alive(m));
      const holder = await locker.acquire(name, 30000);
      const started = Date.now();
      const waiting = locker.acquire(name, 30000, { wait: 8000 });
      await eventually(async () => (await infoAt(source, name)).waiters === 1, 5000, "the waiter on the source");

      await command(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id);
      await command(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.id);
      // A name of the slot that the source does not have: ASK, served by the target.
      const fresh = await locker.acquire(neighbour, 30000);
      assert.equal((await infoAt(target, neighbour)).token, fresh.token);
      // A guarded command follows the ASK too (its keys on the target), its reply the client
      // library's own.
      const data = name.replace("lock", "data");
      await pipeline(target.port, ["ASKING"], ["SET", data, "1"]);
      assert.equal(await fresh.call("GET", data), "1");
      assert.match(String(await infoAt(source, neighbour)), /^Error: ASK /);
      assert.equal(await holder.extend(30000), holder); // still on the source

      // A shorter wait, 700 ms of which pass before the lock moves: it must still end at its own
      // timeout, with the time left, not be sent again whole.
      const shortStarted = Date.now();
      const short = locker.tryAcquire(name, 30000, { wait: 1500 });
      await eventually(async () => (await infoAt(source, name)).waiters === 2, 5000, "the second waiter on the source");
      await new Promise((r) => setTimeout(r, 700 - (Date.now() - shortStarted))); // the time that passes is what is tested

      // The lock moves: its waiters are refused on the source (TRYAGAIN) and queued on the target.
      assert.equal(await command(source.port, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", name), "OK");
      await eventually(async () => (await infoAt(target, name))?.waiters === 2, 5000, "the waiters queued on the target");
      assert.equal(await short, null);
      const shortTook = Date.now() - shortStarted;
      assert.ok(shortTook >= 1400 && shortTook < 1500 + 450, `the 1.5 s wait ended after ${shortTook} ms`);
      assert.equal((await infoAt(target, name)).waiters, 1);
      assert.equal(await holder.extend(30000), holder); // ASK
      assert.equal(await holder.owned(), true);

      // The slot is the target's: MOVED, on the same Locker.
      for (const m of cluster.masters.filter(alive)) await command(m.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
      assert.equal(await holder.release(), true);
      assert.equal(await fresh.call("SET", data, "2"), "OK");
      const next = await waiting;
      assert.ok(Date.now() - started < 8000);
      assert.ok(next.fence > holder.fence);
      assert.equal((await infoAt(target, name)).token, next.token);
      assert.equal(await next.release(), true);
      assert.equal(await fresh.release(), true);
      assert.equal(await locker.info(name), null);
      const again = await locker.acquire(name, 30000);
      assert.equal((await infoAt(target, name)).token, again.token);
      await again.release();
    });

    test("a durable grant waits on the node that granted it, through ASK and MOVED", async () => {
      // masters[2], whom no failover test stops; WAIT on the connection of the grant, to the
      // node that granted it: the grant is on that node's replica when acquire resolves.
      const { name, slot } = await nameOn(2, `${lib.name}:d`);
      const source = await cluster.masterOf(slot);
      const replica = cluster.replicas[cluster.masters.indexOf(source)];
      const acknowledged = async () => {
        for (;;) {
          const [, acks] = await pipeline(source.port, ["SET", name.replace("lock", "probe"), "1"], ["WAIT", "1", "1000"]);
          if (acks === 1) return;
        }
      };
      await acknowledged();
      // Acknowledged grants and renewals get a generous timeout (a loaded machine); the grant
      // that must fail, a short one.
      const durable = { replicas: 1, replicasTimeoutMs: 5000 };
      const hold = await locker.acquire(name, 30000, durable);
      const [, onReplica] = await pipeline(replica.port, ["READONLY"], ["LOCK.INFO", name]);
      assert.ok(Array.isArray(onReplica) && onReplica.includes(hold.token));
      await replica.stopped(async () => {
        const short = { ...durable, replicasTimeoutMs: 250 };
        await assert.rejects(locker.acquire(name.replace("lock", "other"), 30000, short), NotReplicatedError);
        assert.equal(await infoAt(source, name.replace("lock", "other")), null);
      });
      await acknowledged();
      // The lock moves: ASK while the slot is split (ASKING, LOCK.EXTEND and WAIT on one
      // connection to the target), MOVED once it is the target's.
      const target = cluster.masters.find((m) => m !== source && alive(m));
      await command(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id);
      await command(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.id);
      const keys = await command(source.port, "CLUSTER", "GETKEYSINSLOT", slot, "100"); // the lock, the probe
      assert.equal(await command(source.port, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", ...keys), "OK");
      assert.equal(await hold.extend(30000), hold);
      for (const m of cluster.masters.filter(alive)) await command(m.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
      assert.equal(await hold.extend(30000), hold);
      assert.equal((await infoAt(target, name)).token, hold.token);
      assert.equal(await hold.release(), true);
    });

    test("a term and an ephemeral hold live on connections of their own to the slot's node; a close there is signalled at once", async () => {
      const { name, slot } = await nameOn(2, `${lib.name}:e`);
      const node = await cluster.masterOf(slot);
      const lost = [];
      const election = locker.election(name, { leaseMs: 30000, onLost: (err) => lost.push(err) });
      await election.campaign();
      const ephemeral = name.replace("lock", "eph");
      const hold = await locker.acquire(ephemeral, 30000, { ephemeral: true, onLost: (err) => lost.push(err) });
      for (const [key, h] of [[name, election.hold], [ephemeral, hold]]) {
        const info = await infoAt(node, key);
        assert.equal(String(info.client), h.bound.id, "bound to the hold's own connection, on the node serving the slot");
        await command(node.port, "CLIENT", "KILL", "ID", String(info.client));
        if (!h.signal.aborted) await new Promise((resolve) => h.signal.addEventListener("abort", resolve, { once: true }));
        assert.match(h.signal.reason.message, /connection the hold is bound to closed/);
        assert.equal(await infoAt(node, key), null);
      }
      assert.equal(election.isLeader, false);
      assert.equal(lost.length, 2);
    });

    test("after kill -9 of a master and its replica's promotion, the same Locker", async () => {
      const { name } = await nameOn(index, `${lib.name}:f`);
      const master = cluster.masters[index];
      const replica = cluster.replicas[index];
      const hold = await locker.acquire(name, 30000);
      // Renewed every 500 ms through the failover: no loss.
      let promoted;
      const promotion = new Promise((resolve) => (promoted = resolve));
      const renewed = locker.using(name.replace("lock", "renewed"), 1500, async (signal, h) => {
        const at = await promotion;
        await eventually(async () => h.leaseSent > at, 5000, "a renewal answered by the new master");
        return signal.aborted;
      });
      await eventually(async () => (await command(master.port, "LOCK.INFO", name.replace("lock", "renewed"))) !== null, 5000, "the renewed hold");
      assert.equal(await command(master.port, "WAIT", 1, 5000), 1);
      await master.stop(); // SIGKILL
      // Sent while the slot's master is dead; answered once the replica took over.
      const extended = hold.extend(30000);
      await command(replica.port, "CLUSTER", "FAILOVER", "TAKEOVER");
      await eventually(async () => (await command(replica.port, "ROLE"))[0] === "master", 10000, "the promotion");
      promoted(performance.now());
      assert.equal(await extended, hold);
      assert.equal(await renewed, false, "the renewed hold was signalled lost");
      assert.equal(await hold.owned(), true);
      const waiting = locker.acquire(name, 30000, { wait: 5000 });
      await eventually(async () => (await infoAt(replica, name)).waiters === 1, 5000, "the waiter on the new master");
      assert.equal(await hold.release(), true);
      const next = await waiting;
      assert.ok(next.fence > hold.fence);
      assert.equal(await next.release(), true);
      assert.equal(await locker.info(name), null);
    });
  });
}

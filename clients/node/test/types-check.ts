// Compiled by `npm run typecheck` (tsc --noEmit) only: index.d.ts against typical uses.
import Redis, { Cluster } from "ioredis";
import { createClient, createCluster } from "redis";
import { Locker, Hold, MultiHold, CrossSlotError, Election, Leader, HolderInfo, LockInfo, LockBusyError, LockKindError, LockLostError, LockTimeoutError, NotReplicatedError, StaleFenceError } from "..";

declare const client: Redis;

// Every client the package supports is accepted; an object that is not a client is not.
export function clients(cluster: Cluster, nodeRedis: ReturnType<typeof createClient>, nodeCluster: ReturnType<typeof createCluster>): Locker[] {
  // @ts-expect-error an empty object is not a client
  const refused = new Locker({});
  // @ts-expect-error nor is a string
  const refusedToo = new Locker("redis://127.0.0.1");
  void refused, refusedToo;
  return [new Locker(client), new Locker(cluster), new Locker(nodeRedis), new Locker(nodeCluster)];
}

async function uses(): Promise<bigint> {
  const locker = new Locker(client);
  const hold: Hold = await locker.acquire("lock:a", 1000, { wait: 500, token: "t" });
  const fence: bigint = hold.fence;
  await hold.extend();
  const released: boolean = await hold.release();
  const maybe: Hold | null = await locker.tryAcquire("lock:a", 1000);
  const cancel = new AbortController();
  const waited: Hold | null = await locker.tryAcquire("lock:a", 1000, { wait: 2000, signal: cancel.signal });
  const left: number = waited ? waited.leaseLeft : 0;
  const lost: AbortSignal = hold.signal;
  const watched: Hold = await locker.acquire("lock:d", 1000, {
    onLost: (err: LockLostError, h: Hold) => void [err.lockName, h.fence],
  });
  void lost, watched;
  try {
    await hold.extend(1000, 200);
  } catch (e) {
    if (e instanceof LockTimeoutError) void left;
  }
  const n: number = await locker.using("lock:b", 1000, async (signal: AbortSignal, h: Hold) => {
    if (signal.aborted) throw signal.reason;
    return Number(h.fence > 0n);
  });
  await locker.using("lock:c", 1000, { shared: true }, async () => undefined);
  const info = await locker.info("lock:a");
  const ttl: number | undefined = info?.ttl;
  const holders: HolderInfo[] = info?.holders ?? [];
  const first: bigint | undefined = holders[0]?.fence;
  try {
    await locker.acquire("lock:durable", 1000, { replicas: 1, replicasTimeoutMs: 200, aofLocal: true, aofReplicas: 1 });
  } catch (e) {
    if (e instanceof NotReplicatedError && e.released && e.replicas !== undefined) return BigInt(e.needed - e.replicas);
  }
  // @ts-expect-error replicas is a number
  void locker.acquire("lock:durable", 1000, { replicas: "1" });
  const reader: Hold = await locker.acquire("lock:rw", 1000, { shared: true });
  const place: Hold | null = await locker.tryAcquire("lock:pool", 1000, { limit: 3, ephemeral: true });
  const still: boolean = await reader.owned();
  try {
    await locker.acquire("lock:pool", 1000, { limit: 4 });
  } catch (e) {
    if (e instanceof LockKindError && e.limit !== undefined && !e.otherMode) return BigInt(e.limit);
  }
  try {
    await locker.fenced("gate", fence, "SET", "k", "v");
  } catch (e) {
    if (e instanceof StaleFenceError && e.highest !== undefined) return e.highest;
    if (e instanceof LockBusyError || e instanceof LockLostError) return 0n;
  }
  void released, maybe, n, ttl, first, place, still;
  await locker.quit();
  return fence;
}

void uses;

async function elections(): Promise<bigint> {
  const locker = new Locker(client);
  const election: Election = locker.election("election:scheduler", { leaseMs: 5000, data: "10.0.0.5:8080", onLost: (err: LockLostError, e: Election) => void [err, e.name] });
  const term: bigint = await election.campaign();
  const maybe: bigint | null = await election.campaign({ wait: 1000 });
  // @ts-expect-error with `wait`, the term may be null
  const notSure: bigint = await election.campaign({ wait: 1000 });
  const proclaimed: void = await election.proclaim("10.0.0.5:8081");
  await election.proclaim(Buffer.from("10.0.0.5:8082"));
  // @ts-expect-error data is a string or a Buffer
  await election.proclaim(8083);
  const stop = new AbortController();
  for await (const leader of election.observe({ signal: stop.signal })) {
    if (leader === null) continue; // nobody leads
    const data: Buffer | null = leader.data;
    if (leader.term > term && data) break;
  }
  await election.run(
    async (lost: AbortSignal) => {
      if (!lost.aborted) await locker.fenced("gate:x", term, "SET", "k", "v");
    },
    { signal: stop.signal, onElected: (t: bigint) => void t, onNewLeader: (l: Leader | null) => void l },
  );
  election.stop();
  // @ts-expect-error fn is a function
  await election.run("work");
  const now: Leader | null = await election.leader();
  const leading: boolean = election.isLeader;
  const signal: AbortSignal | null = election.signal;
  // @ts-expect-error data is a string or a Buffer
  locker.election("election:x", { data: 7 });
  void maybe, notSure, now, leading, signal;
  return (await election.resign()) ? term : 0n;
}

void elections;

// Several keys at once: a MultiHold with a fence per key, in using() as well.
export async function several(locker: Locker): Promise<bigint> {
  const hold: MultiHold = await locker.acquire(["{acct}:a", "{acct}:b"], 1000, { wait: 500, onLost: (e: LockLostError, h: MultiHold) => void [e, h.fences] });
  const fences: bigint[] = hold.fences;
  const first: bigint = hold.fenceOf("{acct}:a");
  const all: boolean = await hold.release();
  const maybe: MultiHold | null = await locker.tryAcquire(["{acct}:a"], 1000, { shared: true });
  // @ts-expect-error a semaphore's limit is for one key
  await locker.tryAcquire(["{acct}:a"], 1000, { limit: 2 });
  const sum: bigint = await locker.using(["{acct}:a", "{acct}:b"], 1000, async (signal: AbortSignal, h: MultiHold) => h.fences[0] + h.fences[1]);
  try {
    await locker.acquire(["a", "b"], 1000);
  } catch (e) {
    if (e instanceof CrossSlotError) void e.lockName;
  }
  void all, maybe;
  return fences[0] + first + sum;
}

// What both languages offer: autoRenew, reacquire(), info(), locked(), fencesByName, leaseLeft.
export async function parity(locker: Locker): Promise<bigint> {
  const one: Hold = await locker.acquire("lock:a", 1000, { autoRenew: true });
  const again: Hold = await one.reacquire();
  const found: LockInfo | null = await one.info();
  const set: MultiHold = await locker.acquire(["{acct}:a", "{acct}:b"], 1000, { autoRenew: true });
  const infos: Array<LockInfo | null> = await set.info();
  const byName: Map<string | Buffer, bigint> = set.fencesByName;
  const renewed: MultiHold = await set.reacquire();
  const held: boolean = (await locker.locked("lock:a")) || (await locker.locked(["{acct}:a", "{acct}:b"]));
  const left: number = locker.election("election:x").leaseLeft;
  // @ts-expect-error autoRenew is a boolean
  await locker.acquire("lock:a", 1000, { autoRenew: 1 });
  void again, found, infos, renewed, held, left;
  return byName.get("{acct}:a") || 0n;
}

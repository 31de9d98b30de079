// election.proclaim(data): the leader changes its public data in the same term. It is a re-grant
// of the term: LOCK.ACQUIRE with the term's token, its lease, EPHEMERAL (the term stays bound to
// its connection) and the new DATA, sent on the term's own connection; the server keeps the fence,
// replaces the data, and wakes the observers that saw the old (LOCK.OBSERVE … SEEN). What the
// answer means is decided in `outcome` (no I/O):
//   - the term's fence: kept; the lease clock restarts from the request;
//   - nil (another holds the key): the term was lost;
//   - another fence: the term had ended and the key was free, so this made a new grant, which is
//     not taken: it is released at once, and the term is lost.
"use strict";

const { LockLostError } = require("./errors");
const durable = require("./durable");
const { now } = require("./clock");
const { translate, parseGrant } = require("./replies");

/** The re-grant that proclaims `data` in the term held with `token`. */
function proclaimArgs(name, token, leaseMs, data) {
  return ["LOCK.ACQUIRE", name, token, "PX", leaseMs, "EPHEMERAL", "DATA", data];
}

/** What the re-grant's answer (`grant`: parsed, or null) means for the term `fence`: "kept", "lost" or "taken" (a new grant, to give back). */
function outcome(grant, fence) {
  if (grant === null) return "lost";
  return grant.fence === fence ? "kept" : "taken";
}

const notLeading = (name, why) => new LockLostError(`cannot proclaim in the election ${name}: ${why}`, name);

/** Carries out election.proclaim(`value`) (a checked Buffer, or null). */
async function proclaim(election, value) {
  const name = election.name;
  if (value === null) throw new TypeError("proclaim needs data: a string or a Buffer of 1 to 4096 bytes");
  const hold = election.hold;
  if (!election.isLeader) throw notLeading(name, "this candidate does not lead");
  const d = hold.durability;
  const sent = now();
  let reply;
  try {
    const follow = d && durable.follow(d, election.leaseMs);
    const args = proclaimArgs(name, hold.token, election.leaseMs, value);
    reply = await hold.channel.send(args, name, Math.max(hold.leaseLeft, 1000), "proclaim", { follow });
  } catch (err) {
    throw translate(err, name, "proclaim");
  }
  const result = outcome(parseGrant(d ? reply.reply : reply, name), hold.fence);
  if (result !== "kept") {
    if (result === "taken") {
      // Given back on the same connection; without an answer, the connection's close (lose()) ends it.
      await hold.channel.send(["LOCK.RELEASE", name, hold.token], name, 1000, "proclaim").catch(() => {});
    }
    const err = notLeading(name, "the term was lost");
    hold.lose(err);
    throw err;
  }
  election.data = value;
  if (d) {
    const acks = durable.acks(d, reply);
    if (!acks.ok) throw durable.shortfall(d, acks, name, "proclamation");
  }
  if (!hold.signal.aborted) {
    hold.ttl = election.leaseMs;
    hold.setLease(sent, election.leaseMs);
  }
}

module.exports = { proclaim, proclaimArgs, outcome };

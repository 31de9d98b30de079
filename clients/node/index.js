// Locks for the redislock Redis module, for ioredis and node-redis, on one server or a Redis
// Cluster (see index.d.ts and docs/clients.md). The lock's own replies are read as strings and
// Buffers on the library's own connections, never as JavaScript numbers, so fences stay exact
// past 2^53; the command run inside call()/fenced() answers as the client library answers it.
"use strict";

const {
  LockError,
  LockBusyError,
  LockLostError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
  LockTimeoutError,
  NotReplicatedError,
  CrossSlotError,
} = require("./errors");
const { Election } = require("./election");
const { Hold } = require("./hold");
const { Locker } = require("./locker");
const { MultiHold } = require("./tools");
// The release, one number for the module and both clients (Cargo.toml's; a test checks they agree).
const { version } = require("./package.json");

module.exports = {
  version,
  Locker,
  Hold,
  MultiHold,
  Election,
  LockError,
  LockBusyError,
  LockLostError,
  LockTimeoutError,
  UnsupportedError,
  LockKindError,
  StaleFenceError,
  NotReplicatedError,
  CrossSlotError,
};

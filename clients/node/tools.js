// What election.js and multi.js use of the rest of the package, handed to them as one object each
// (they do not require the modules themselves), and the multi-key hold class made from it.
"use strict";

const { LockTimeoutError } = require("./errors");
const multi = require("./multi");
const { now, clock, pause, within, COMMAND_TIMEOUT_MS, WAIT_GRACE_MS } = require("./clock");
const { newToken, shown, checkName, positiveMs, modeArgs, abortReason } = require("./args");
const { errorText, isUnsupported, translate, str, isReply } = require("./replies");
const { keySlot } = require("./cluster");
const { Hold } = require("./hold");

/** What election.js uses of the package. */
const ELECTION_TOOLS = {
  now,
  pause,
  within,
  isReply,
  isUnsupported,
  abortReason,
  checkName,
  positiveMs,
  shown,
  LockTimeoutError,
  COMMAND_TIMEOUT_MS,
  WAIT_GRACE_MS,
};

/** What multi.js uses of the package, and its hold class (a Hold over several keys). */
const MULTI_TOOLS = {
  ...ELECTION_TOOLS,
  Hold,
  clock,
  str,
  errorText,
  translate,
  keySlot,
  modeArgs,
  newToken,
};
const MultiHold = multi.makeMultiHold(MULTI_TOOLS);

module.exports = { ELECTION_TOOLS, MULTI_TOOLS, MultiHold };

// The caller's arguments, without I/O: checked (TypeError, RangeError, with the value shown) and
// turned into the lock's command arguments.
"use strict";

const crypto = require("node:crypto");

const { LockError } = require("./errors");

const newToken = () => crypto.randomBytes(16).toString("hex");

/** A value as given, for an error message: strings quoted, with their type where it misleads. */
function shown(value) {
  if (typeof value === "string") return `${JSON.stringify(value)} (a string)`;
  if (typeof value === "bigint") return `${value}n`;
  if (value === null || value === undefined || typeof value === "number" || typeof value === "boolean") return String(value);
  return `a value of type ${typeof value === "object" ? (value.constructor && value.constructor.name) || "object" : typeof value}`;
}

function checkName(name, what = "name") {
  if (typeof name === "string" || Buffer.isBuffer(name)) return name;
  throw new TypeError(`${what} must be a string or a Buffer, not ${shown(name)}`);
}

function positiveMs(value, what) {
  if (typeof value !== "number") throw new TypeError(`${what} must be a positive integer of milliseconds, not ${shown(value)}`);
  if (!Number.isInteger(value) || value <= 0) throw new RangeError(`${what} must be a positive integer of milliseconds, not ${value}`);
  return value;
}

function fenceArg(fence) {
  if (typeof fence === "bigint" || (typeof fence === "number" && Number.isSafeInteger(fence)) || (typeof fence === "string" && /^\d+$/.test(fence))) {
    const value = BigInt(fence);
    if (value >= 0n) return value.toString();
  }
  throw new TypeError(`fence must be a bigint, a safe integer or a string of digits (a hold's fence), not ${shown(fence)}`);
}

/** The most places a semaphore (`limit`) may have. */
const MAX_LIMIT = 1000000;

function modeArgs(opts) {
  const args = [];
  if (opts.shared && opts.limit !== undefined) throw new RangeError("shared and limit exclude each other");
  if (opts.shared) args.push("SHARED");
  if (opts.limit !== undefined) {
    if (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_LIMIT) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${shown(opts.limit)}`);
    }
    args.push("LIMIT", opts.limit);
  }
  if (opts.ephemeral) args.push("EPHEMERAL");
  return args;
}

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new LockError("aborted");
}

module.exports = {
  newToken,
  shown,
  checkName,
  positiveMs,
  fenceArg,
  modeArgs,
  abortReason,
};

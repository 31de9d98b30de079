// Redis Cluster, without I/O: the slot of a key, and what a redirection or a "not now" answer says.
"use strict";

const { errorText } = require("./replies");

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

/** The Cluster slot of a key (CRC16 of the key, or of its {hash tag}, modulo 16384). */
function keySlot(key) {
  let bytes = Buffer.isBuffer(key) ? key : Buffer.from(String(key));
  const open = bytes.indexOf(0x7b); // {
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ b) & 0xff];
  return crc & 16383;
}

/** A Cluster redirection: { kind: "MOVED" | "ASK", slot, address }, or null. */
function redirection(err) {
  const m = errorText(err).match(/^(MOVED|ASK) (\d+) (\S+)$/);
  return m ? { kind: m[1], slot: Number(m[2]), address: m[3] } : null;
}

/** A Cluster answer that says "not now, here": retried after a pause (TRYAGAIN, CLUSTERDOWN). */
const RETRY_LATER = /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN)\b/;

/** Pauses between the retries of a Cluster command: short at first, then a quarter of a second. */
const retryPause = (attempt) => Math.min(25 * 2 ** attempt, 250);

module.exports = {
  keySlot,
  redirection,
  RETRY_LATER,
  retryPause,
};

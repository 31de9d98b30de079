// The client libraries (ioredis, node-redis) behind one connection interface: call(), raw(),
// ready(), alive, onClose(), destroy(), close(); a connector per library opens them. I/O only: what to send
// and what the answers mean is decided by the callers.
"use strict";

const { LockError, LockTimeoutError } = require("./errors");
const { within, COMMAND_TIMEOUT_MS } = require("./clock");

// --- connections: one kind per client library -------------------------------------------------------
//
// A connection of the locker's own answers `call()` with bulk strings as Buffers and integers as
// strings (the lock's commands), and `raw()` as the client library answers by default (the
// command inside call() and fenced()). Every command goes through connections of the locker's
// own, never the application's: a blocking call in the application (BLPOP, a slow script) must
// not hold up a renewal. In a Cluster there is one such connection per node, opened from the
// application's client with its options (password, TLS) and the node's address.

const quiet = () => {}; // connection errors surface as rejected commands, not as 'error' events

function splitAddress(address) {
  const at = address.lastIndexOf(":");
  return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
}

// A command that must not be re-sent behind the caller's back when its connection drops (ioredis
// would send it again, whole, on the next connection): it fails, and the locker decides.
const IOREDIS_ONCE = { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, enableOfflineQueue: true };

// A connection that a hold is bound to (EPHEMERAL): none of the application's timeouts (its
// commands', its socket's), and no reconnection or queue of the library's: a close is the end of
// the hold, reported by onClose(), never hidden behind a new connection.
const IOREDIS_OWNED = {
  ...IOREDIS_ONCE,
  enableOfflineQueue: false,
  retryStrategy: null,
  reconnectOnError: null,
  commandTimeout: undefined,
  socketTimeout: undefined,
  blockingTimeout: undefined,
  enableAutoPipelining: false,
};

// A connection for a wait (LOCK.ACQUIRE … BLOCK, LOCK.OBSERVE … BLOCK): the locker bounds each wait
// itself (its time + a margin), so none of the application's timeouts, which would end a wait
// early and leave the waiter queued in the server.
const IOREDIS_WAIT = { ...IOREDIS_ONCE, commandTimeout: undefined, socketTimeout: undefined, blockingTimeout: undefined };

/** The options of each kind of connection: the shared one (false), one for a wait (true), one a hold is bound to ("owned"). */
const ioredisExtra = (kind) => (kind === "owned" ? IOREDIS_OWNED : kind ? IOREDIS_WAIT : {});

class IoredisConnection {
  constructor(source, options) {
    this.source = source;
    this.options = options;
    this.conn = source.duplicate(options);
    if (typeof this.conn.on === "function") this.conn.on("error", quiet);
    this.rawConn = null;
  }

  // `asking`: ASKING first, on the same connection (a Cluster's ASK redirection).
  call(args, asking = false) {
    if (asking) this.conn.call("ASKING").catch(() => {});
    return this.conn.callBuffer(String(args[0]), ...args.slice(1));
  }

  // The application's options as they are (stringNumbers or not): the reply ioredis gives.
  raw(args, asking = false) {
    if (!this.rawConn) {
      const { stringNumbers, ...options } = this.options;
      void stringNumbers;
      this.rawConn = this.source.duplicate(options);
      if (typeof this.rawConn.on === "function") this.rawConn.on("error", quiet);
    }
    if (asking) this.rawConn.call("ASKING").catch(() => {});
    return this.rawConn.call(String(args[0]), ...args.slice(1));
  }

  ready() {
    const conn = this.conn;
    if (conn.status === undefined || conn.status === "ready") return Promise.resolve();
    if (conn.status === "end") return Promise.reject(new Error("Connection is closed."));
    return new Promise((resolve, reject) => {
      const ok = () => {
        conn.removeListener("end", gone);
        resolve();
      };
      const gone = () => {
        conn.removeListener("ready", ok);
        reject(new Error("Connection is closed."));
      };
      conn.once("ready", ok);
      conn.once("end", gone);
    });
  }

  get alive() {
    return this.conn.status !== "end";
  }

  /** Calls `fn(why)` once when the connection closes (the socket's 'close', or its end). */
  onClose(fn) {
    let told = false;
    const tell = (why) => {
      if (told) return;
      told = true;
      fn(why);
    };
    if (typeof this.conn.once === "function") {
      this.conn.once("close", () => tell("the socket closed"));
      this.conn.once("end", () => tell("the connection ended"));
    }
    if (!this.alive) tell("the connection ended");
  }

  destroy() {
    for (const c of [this.conn, this.rawConn]) if (c && typeof c.disconnect === "function") c.disconnect();
  }

  async close() {
    await Promise.all(
      [this.conn, this.rawConn].filter(Boolean).map((c) => within(Promise.resolve().then(() => c.quit()), 1000, () => new Error("quit")).catch(() => c.disconnect())),
    );
  }
}

class IoredisConnector {
  constructor(client) {
    this.client = client;
    this.cluster = client.isCluster === true;
    this.baseClient = null;
  }

  /** A node client of the application's Cluster, whose options the locker's connections take. */
  async base() {
    if (this.baseClient) return this.baseClient;
    const nodes = () => this.client.nodes("all");
    if (!nodes().length) {
      await within(
        new Promise((resolve) => this.client.once("ready", resolve)),
        COMMAND_TIMEOUT_MS,
        () => new LockTimeoutError("the ioredis Cluster did not connect within 5 s"),
      );
    }
    this.baseClient = nodes()[0];
    return this.baseClient;
  }

  /** A connection to `address` (null outside Cluster) of the kind given (see ioredisExtra). */
  async open(address, kind) {
    const extra = ioredisExtra(kind);
    if (!this.cluster) return new IoredisConnection(this.client, { stringNumbers: true, lazyConnect: false, ...extra });
    const { host, port } = splitAddress(address);
    // No reconnection of its own: a node that went away is looked up again in the topology.
    return new IoredisConnection(await this.base(), {
      host,
      port,
      stringNumbers: true,
      lazyConnect: false,
      retryStrategy: null,
      readOnly: false,
      ...extra,
    });
  }

  seeds() {
    const out = [];
    for (const n of this.client.nodes("master")) out.push(`${n.options.host}:${n.options.port}`);
    for (const n of this.client.startupNodes || []) {
      if (typeof n === "number") out.push(`127.0.0.1:${n}`);
      else if (typeof n === "string") out.push(/:\d+$/.test(n) ? n.replace(/^rediss?:\/\/([^@]*@)?/, "") : `${n}:6379`);
      else if (n && typeof n === "object") out.push(`${n.host || "127.0.0.1"}:${n.port || 6379}`);
    }
    return out;
  }
}

// RESP type codes (the protocol's own first bytes): ':' integer, '$' bulk string, '+' simple
// string, '%' map. Integers as strings, strings as Buffers, maps as flat arrays. No command
// timeout of the library's (the locker bounds each command itself, waits included).
const NODE_REDIS_OPTIONS = { typeMapping: { 58: String, 36: Buffer, 43: Buffer, 37: Array }, timeout: 0 };

/**
 * The options of a connection a hold is bound to (see IOREDIS_OWNED): the application's socket
 * options (host, port, TLS) without its socket timeout or reconnection; no offline queue, no
 * command options (their timeout), no pings of the library's (the hold's own keep it alive).
 */
function nodeRedisOwned(socket) {
  return {
    socket: { ...socket, reconnectStrategy: false, socketTimeout: undefined },
    disableOfflineQueue: true,
    commandOptions: undefined,
    pingInterval: undefined,
  };
}

/** The options of a connection for a wait (see IOREDIS_WAIT): no socket timeout, no command options. */
function nodeRedisWait(socket) {
  return { socket: { ...socket, socketTimeout: undefined }, commandOptions: undefined };
}

class NodeRedisConnection {
  constructor(conn) {
    this.conn = conn;
    conn.on("error", quiet);
    this.connecting = conn.connect();
    this.connecting.catch(() => {});
  }

  async call(args, asking = false) {
    await this.connecting;
    if (asking) this.conn.sendCommand(["ASKING"]).catch(() => {});
    return this.conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))), NODE_REDIS_OPTIONS);
  }

  async raw(args, asking = false) {
    await this.connecting;
    if (asking) this.conn.sendCommand(["ASKING"]).catch(() => {});
    return this.conn.sendCommand(args.map((a) => (Buffer.isBuffer(a) ? a : String(a))));
  }

  ready() {
    return this.connecting.then(() => undefined);
  }

  get alive() {
    return this.conn.isOpen !== false;
  }

  /** Calls `fn(why)` once when the connection closes ('terminated': it will not reconnect; 'end'). */
  onClose(fn) {
    let told = false;
    const tell = (why) => {
      if (told) return;
      told = true;
      fn(why);
    };
    this.conn.once("terminated", (cause) => tell(`the socket closed${cause && cause.message ? ` (${cause.message})` : ""}`));
    this.conn.once("end", () => tell("the connection ended"));
    if (!this.alive) tell("the connection ended");
  }

  destroy() {
    try {
      this.conn.destroy ? this.conn.destroy() : this.conn.disconnect();
    } catch {
      // already closed
    }
  }

  async close() {
    await within(
      Promise.resolve().then(() => (this.conn.close ? this.conn.close() : this.conn.quit())),
      1000,
      () => new Error("quit"),
    ).catch(() => this.destroy());
  }
}

class NodeRedisConnector {
  constructor(client) {
    this.client = client;
    this.cluster = typeof client.nodeClient === "function";
    this.baseClient = null;
  }

  /** A connection to `address` (null outside Cluster): shared (false), for a wait (true), or "owned" by a hold. */
  async open(address, kind) {
    if (!this.cluster) {
      const socket = (this.client.options && this.client.options.socket) || {};
      if (!kind) return new NodeRedisConnection(this.client.duplicate());
      return new NodeRedisConnection(this.client.duplicate(kind === "owned" ? nodeRedisOwned(socket) : nodeRedisWait(socket)));
    }
    if (!this.baseClient) {
      const masters = this.client.masters || [];
      if (!masters.length) throw new LockError("the node-redis cluster client is not connected (await cluster.connect())");
      this.baseClient = await this.client.nodeClient(masters[0]);
    }
    const base = this.baseClient;
    const { host, port } = splitAddress(address);
    const socket = { ...((base.options && base.options.socket) || {}), host, port, reconnectStrategy: false };
    const options = kind === "owned" ? nodeRedisOwned(socket) : kind ? nodeRedisWait(socket) : { socket };
    return new NodeRedisConnection(base.duplicate(options));
  }

  seeds() {
    return (this.client.masters || []).map((m) => `${m.host}:${m.port}`);
  }
}

function connectorFor(client) {
  if (client && typeof client === "object" && typeof client.duplicate === "function") {
    if (typeof client.callBuffer === "function") return new IoredisConnector(client);
    if (typeof client.sendCommand === "function") return new NodeRedisConnector(client);
  }
  throw new TypeError("redislock needs an ioredis client (Redis or Cluster) or a connected node-redis 6 client (createClient or createCluster)");
}

module.exports = {
  splitAddress,
  connectorFor,
};

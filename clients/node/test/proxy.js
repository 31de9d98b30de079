// A fault-injection TCP proxy on loopback, between the clients and a test server: it can
// black-hole the traffic (a partition: sockets stay open, bytes stop, and flow again on heal, as
// TCP retransmits them), cut every connection, or delay each chunk (a slow network).
"use strict";

const net = require("node:net");

class Proxy {
  static start(targetPort) {
    const proxy = new Proxy(targetPort);
    return new Promise((resolve) => proxy.server.listen(0, "127.0.0.1", () => resolve(proxy)));
  }

  constructor(targetPort) {
    this.targetPort = targetPort;
    this.open = true;
    this.delayMs = 0;
    this.delayCloses = false;
    this.sockets = new Set();
    this.held = []; // chunks stopped by a partition, in order: [socket, data]
    this.server = net.createServer((client) => this.accept(client));
  }

  get port() {
    return this.server.address().port;
  }

  accept(client) {
    const upstream = net.connect(this.targetPort, "127.0.0.1");
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ]) {
      this.sockets.add(from);
      from.on("data", (data) => this.forward(to, data));
      from.on("error", () => {});
      from.on("close", () => {
        this.sockets.delete(from);
        // With slow(ms, { closes: true }) the close comes after the bytes before it.
        if (this.delayMs && this.delayCloses) setTimeout(() => to.destroy(), this.delayMs);
        else to.destroy();
      });
    }
  }

  forward(to, data) {
    if (!this.open) return void this.held.push([to, data]);
    if (this.delayMs) setTimeout(() => to.destroyed || to.write(data), this.delayMs);
    else to.write(data);
  }

  /** A partition: nothing gets through either way until heal(). */
  blackhole() {
    this.open = false;
  }

  heal() {
    this.open = true;
    for (const [to, data] of this.held.splice(0)) if (!to.destroyed) to.write(data);
  }

  /** Closes every proxied connection (new ones are still accepted). */
  cut() {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  /** Delays every chunk by `ms`, each way (and every close, with `closes`). */
  slow(ms, { closes = false } = {}) {
    this.delayMs = ms;
    this.delayCloses = closes;
  }

  async close() {
    this.held = [];
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

module.exports = { Proxy };

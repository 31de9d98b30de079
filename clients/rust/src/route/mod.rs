//! A locker's connections on a Redis Cluster: its own slot table (`CLUSTER SLOTS`, then each
//! `MOVED`), one multiplexed connection of its own to each master for its commands, and a new
//! connection to the key's master for each wait in the server (closing it drops the waiter).
//!
//! A command follows `MOVED` and `ASK` (sent after `ASKING`, on the same connection), waits out
//! `TRYAGAIN` and `CLUSTERDOWN`, and when a node does not answer (a failover) reads the table
//! again and sends once more, all within its bound. A guarded write is never sent again once it
//! may have reached a node. A wait is never sent again here: its `BLOCK` is the time it had left
//! when it was built, so a redirect goes back to the acquire, which builds it again from its
//! deadline (`core::acquire`, `core::redirect`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ConnectionInfo, RedisResult, Value};

use crate::core::durable::Follow;
use crate::core::error::reply_text;
use crate::core::redirect::{self, Redirect, SlotMap};

/// The bound of each `CLUSTER SLOTS` of a refresh.
const REFRESH_BOUND: Duration = Duration::from_secs(1);

/// A follow-up's answer (`WAIT` after a grant), if one was sent.
pub(crate) type Followed = Option<RedisResult<Value>>;

/// A follow-up of a request: the lines (one pipeline) and bound it makes of the reply, if any.
pub(crate) trait Then: FnOnce(&Value) -> Option<Follow> {}
impl<F: FnOnce(&Value) -> Option<Follow>> Then for F {}

pub(crate) struct Route {
    seeds: Vec<ConnectionInfo>,
    map: Mutex<SlotMap>,
    /// Read the table again before the next request (a node was lost, the cluster was down).
    stale: AtomicBool,
    /// Where the next request of a slot goes after `ASKING` (one request each).
    asks: Mutex<HashMap<u16, String>>,
    conns: tokio::sync::Mutex<HashMap<String, MultiplexedConnection>>,
}

/// A server error reply of the client's own making.
pub(crate) fn server_error(text: &str) -> redis::RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(e)) => e.into(),
        _ => std::io::Error::other(text.to_string()).into(),
    }
}

pub(crate) fn timed_out() -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within the bound").into()
}

async fn within<T>(
    until: Option<Instant>,
    work: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match until {
        None => work.await,
        Some(at) => tokio::time::timeout_at(at.into(), work)
            .await
            .unwrap_or_else(|_| Err(timed_out())),
    }
}

fn host_of(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(h, _) => h.clone(),
        _ => String::new(),
    }
}

impl Route {
    /// A route through the cluster of `seeds` (any of its nodes; the first one's settings, its
    /// password, protocol, are every node's).
    pub fn new(seeds: Vec<ConnectionInfo>) -> RedisResult<Arc<Route>> {
        if seeds.is_empty() {
            return Err(server_error("ERR a Cluster needs at least one node"));
        }
        Ok(Arc::new(Route {
            seeds,
            map: Mutex::new(SlotMap::default()),
            stale: AtomicBool::new(true),
            asks: Mutex::new(HashMap::new()),
            conns: tokio::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// A route through the same cluster on connections of its own, starting from this one's
    /// slot table.
    pub fn again(&self) -> Arc<Route> {
        Arc::new(Route {
            seeds: self.seeds.clone(),
            map: Mutex::new(self.map().clone()),
            stale: AtomicBool::new(self.stale.load(Ordering::SeqCst)),
            asks: Mutex::new(HashMap::new()),
            conns: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The first node given: its settings are every node's.
    pub fn seed(&self) -> &ConnectionInfo {
        &self.seeds[0]
    }

    fn map(&self) -> MutexGuard<'_, SlotMap> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn asks(&self) -> MutexGuard<'_, HashMap<u16, String>> {
        self.asks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn info_of(&self, addr: &str) -> RedisResult<ConnectionInfo> {
        let (host, port) = redirect::split_addr(addr)
            .ok_or_else(|| server_error(&format!("ERR not a node address: {addr}")))?;
        Ok(self
            .seed()
            .clone()
            .set_addr(ConnectionAddr::Tcp(host.to_string(), port)))
    }

    /// A client of the node at `addr` (`host:port`), with the cluster's settings.
    pub fn client_of(&self, addr: &str) -> RedisResult<redis::Client> {
        redis::Client::open(self.info_of(addr)?)
    }

    /// Reads the slot table again, from the first node that answers: the masters known, then
    /// the nodes given.
    async fn refresh(&self) -> RedisResult<()> {
        let known = self.map().masters();
        let mut nodes: Vec<ConnectionInfo> =
            known.iter().filter_map(|a| self.info_of(a).ok()).collect();
        nodes.extend(self.seeds.iter().cloned());
        let mut last = server_error(redirect::NODE_LOST);
        for info in nodes {
            let host = host_of(&info);
            let client = redis::Client::open(info)?;
            let asked = within(Instant::now().checked_add(REFRESH_BOUND), async {
                let mut c = crate::renewer::connect(&client).await?;
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut c)
                    .await
            })
            .await;
            match asked.map(|v| SlotMap::from_slots(&v, &host)) {
                Ok(Some(map)) => {
                    *self.map() = map;
                    self.stale.store(false, Ordering::SeqCst);
                    return Ok(());
                }
                Ok(None) => last = server_error("ERR not a CLUSTER SLOTS reply"),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Where the next request of `slot` goes, and whether after `ASKING`.
    async fn target(&self, slot: Option<u16>) -> RedisResult<(String, bool)> {
        if let Some(addr) = slot.and_then(|s| self.asks().remove(&s)) {
            return Ok((addr, true));
        }
        let slot = slot.unwrap_or(0);
        let known = self.map().owner(slot);
        match known {
            Some(a) if !self.stale.load(Ordering::SeqCst) => Ok((a.to_string(), false)),
            _ => {
                self.refresh().await?;
                let owner = self.map().owner(slot);
                owner
                    .map(|a| (a.to_string(), false))
                    .ok_or_else(|| server_error("CLUSTERDOWN Hash slot not served"))
            }
        }
    }

    /// The client of the master of `key` now (a connection-bound hold opens its own there), and
    /// whether its first request goes after `ASKING`.
    pub async fn client_for(&self, key: &[u8]) -> RedisResult<(redis::Client, bool)> {
        self.client_for_slot(Some(redirect::key_slot(key))).await
    }

    /// `client_for` the master of `slot` (`None`: a request without keys).
    pub async fn client_for_slot(&self, slot: Option<u16>) -> RedisResult<(redis::Client, bool)> {
        let (addr, asking) = self.target(slot).await?;
        Ok((self.client_of(&addr)?, asking))
    }

    /// Reads the slot table (a locker on a Cluster reads it when made).
    pub async fn load(&self) -> RedisResult<()> {
        self.refresh().await
    }

    /// Learns what the error `e` of the node at `addr` says of the slot table.
    pub fn learn(&self, e: &redis::RedisError, addr: &str) -> Option<Redirect> {
        let r = reply_text(e).as_deref().and_then(redirect::parse);
        let Some(r) = r else {
            if reply_text(e).is_none() {
                self.stale.store(true, Ordering::SeqCst); // the node is gone, or going
            }
            return None;
        };
        let host = redirect::split_addr(addr).map_or("", |(h, _)| h);
        match &r {
            Redirect::Moved { slot, addr } => {
                self.map().moved(*slot, &redirect::resolve(addr, host))
            }
            Redirect::Ask { slot, addr } => {
                self.asks().insert(*slot, redirect::resolve(addr, host));
            }
            Redirect::TryAgain => {}
            Redirect::Down => self.stale.store(true, Ordering::SeqCst),
        }
        Some(r)
    }

    async fn shared(&self, addr: &str) -> RedisResult<MultiplexedConnection> {
        if let Some(c) = self.conns.lock().await.get(addr) {
            return Ok(c.clone());
        }
        let c = crate::renewer::connect(&self.client_of(addr)?).await?;
        self.conns.lock().await.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    async fn forget(&self, addr: &str) {
        self.conns.lock().await.remove(addr);
        self.stale.store(true, Ordering::SeqCst);
    }
}

mod send;

pub(crate) use send::{channel_send, send_about, send_blocking, send_blocking_about};

//! The blocking locker on a Redis Cluster.

use std::sync::Arc;

use super::{conn, Locker, LockerInner};
use crate::core::error::Result;
use crate::node_of::NodeOf;
use crate::renewer::Channel;
use crate::route::Route;

impl Locker {
    /// A locker on the Redis Cluster of `nodes` (any of its nodes, `redis://host:port/`; the
    /// first one's settings, its password and protocol, are used for every node). It reads the
    /// slot table at once: an error if no node given answers.
    ///
    /// It keeps the slot table itself (`CLUSTER SLOTS`, then each `MOVED`) and talks to each
    /// master on connections of its own: every command goes to the master of its key,
    /// following `MOVED` and `ASK`, waiting out `TRYAGAIN` and `CLUSTERDOWN`, and reading the
    /// table again when a node stops answering (a failover), within the command's bound. A wait
    /// in the server goes on a connection of its own to the key's master; one that a slot
    /// migration or a failover interrupts is sent again to the master now serving the key with
    /// the time it has left, so it still ends at its own deadline. A connection-bound hold
    /// (`ephemeral`) lives on a connection of its own to the master that granted it. Keep the
    /// names of one multi-lock or guarded write in one slot (`{hash tags}`).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redislock_client::Locker;
    ///
    /// let locker = Locker::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"])?;
    /// let hold = locker.lock("{order:42}:lock").acquire(Duration::from_secs(5))?;
    /// println!("fence {}", hold.fence());
    /// # Ok::<(), redislock_client::Error>(())
    /// ```
    pub fn cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Locker> {
        let seeds = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let route = Route::new(seeds)?;
        let loading = route.clone();
        crate::renewer::run_blocking(async move { loading.load().await })?;
        let client = redis::Client::open(route.seed().clone())?;
        Ok(Locker {
            inner: Arc::new(LockerInner {
                channel: Channel::routed(route.clone()),
                conns: conn::Conns::routed(client, route),
                timeout: crate::COMMAND_TIMEOUT,
            }),
        })
    }

    /// Whether the locker is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.conns.route().is_some()
    }

    /// The server of `key` (an observer's connection goes there): on a Cluster, the master
    /// serving it at each connection.
    pub(crate) fn node_of(&self, key: &[u8]) -> NodeOf {
        match self.inner.conns.route() {
            None => NodeOf::One(self.client().clone()),
            Some(route) => NodeOf::Cluster {
                route: route.clone(),
                key: key.to_vec(),
            },
        }
    }
}

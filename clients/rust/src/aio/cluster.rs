//! The tokio locker on a Redis Cluster.

use std::sync::Arc;

use super::{Inner, Locker};
use crate::core::error::Result;
use crate::node_of::NodeOf;
use crate::node_of::Target;
use crate::renewer::Channel;
use crate::route::Route;

impl Locker {
    /// A locker on the Redis Cluster of `nodes` (see the blocking [`crate::Locker::cluster`]),
    /// once it read the slot table.
    pub async fn cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Locker> {
        let seeds = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let route = Route::new(seeds)?;
        route.load().await?;
        Ok(Locker {
            inner: Arc::new(Inner {
                client: redis::Client::open(route.seed().clone())?,
                channel: Channel::routed(route.clone()),
                route: Some(route),
            }),
        })
    }

    /// Whether the locker is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.route.is_some()
    }
}

impl Inner {
    /// The server of `key` (an observer's connection goes there): on a Cluster, the master
    /// serving it at each connection.
    pub(super) fn node_of(&self, key: &[u8]) -> NodeOf {
        match &self.route {
            None => NodeOf::One(self.client.clone()),
            Some(route) => NodeOf::Cluster {
                route: route.clone(),
                key: key.to_vec(),
            },
        }
    }

    /// Where a connection-bound hold's own connection goes.
    pub(super) fn target(&self) -> Target {
        match &self.route {
            Some(r) => Target::Cluster(r.clone()),
            None => Target::One(self.client.clone()),
        }
    }
}

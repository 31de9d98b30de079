//! The server a connection of its own goes to: the one server, or, on a Redis Cluster, the
//! master serving the key now, found again after a redirect or a lost node (an observer's
//! connection: `NodeOf`; a bound hold's: `Target`).

use std::sync::Arc;

use crate::core::error::reply_text;
use crate::core::redirect::{self, Redirect};
use crate::route::Route;

#[derive(Clone)]
pub(crate) enum NodeOf {
    One(redis::Client),
    Cluster { route: Arc<Route>, key: Vec<u8> },
}

impl From<redis::Client> for NodeOf {
    fn from(client: redis::Client) -> NodeOf {
        NodeOf::One(client)
    }
}

impl NodeOf {
    /// The client to open the next connection from.
    pub async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            NodeOf::One(c) => Ok(c.clone()),
            NodeOf::Cluster { route, key } => route.client_for(key).await.map(|(c, _)| c),
        }
    }

    /// `client`, from a thread outside any runtime (on the renewal thread's).
    pub fn client_blocking(&self) -> redis::RedisResult<redis::Client> {
        match self {
            NodeOf::One(c) => Ok(c.clone()),
            cluster => {
                let cluster = cluster.clone();
                crate::renewer::run_blocking(async move { cluster.client().await })
            }
        }
    }

    /// After the error `e` of a connection opened from `client`: whether to open the next one
    /// anew (it failed, or, on a Cluster, the name's slot is served elsewhere now or soon).
    pub fn reopen(&self, e: &redis::RedisError, client: Option<&redis::Client>) -> bool {
        let text = reply_text(e);
        let NodeOf::Cluster { route, .. } = self else {
            return text.is_none();
        };
        let addr = client.map_or(String::new(), |c| match c.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
            _ => String::new(),
        });
        match text.as_deref().and_then(redirect::parse) {
            // Not followed with `ASKING`: waited out until the move ends with `MOVED`.
            Some(Redirect::Ask { .. }) => true,
            Some(_) => {
                route.learn(e, &addr);
                true
            }
            None if text.is_none() => {
                route.learn(e, &addr);
                true
            }
            None => false,
        }
    }
}

/// Where a bound hold's connection goes: the one server, or the master of its key.
pub(crate) enum Target {
    One(redis::Client),
    Cluster(Arc<crate::route::Route>),
}

impl From<&redis::Client> for Target {
    fn from(client: &redis::Client) -> Target {
        Target::One(client.clone())
    }
}

pub(crate) type Node = redis::RedisResult<(redis::Client, bool)>;

impl Target {
    /// The client of the server to open a connection to for the request `line` (on a Cluster,
    /// the master of its keys' slot: keys in several slots are refused with `CROSSSLOT`), and
    /// whether the request goes after `ASKING`.
    pub async fn node(&self, line: &[Vec<u8>]) -> Node {
        match self {
            Target::One(c) => Ok((c.clone(), false)),
            Target::Cluster(route) => {
                let slot = redirect::slot_of(line).map_err(crate::route::server_error)?;
                route.client_for_slot(slot).await
            }
        }
    }

    /// The error `e` of a send to `node`, as the acquire's decisions take it: on a Cluster, a
    /// redirect is learnt, and a node that could not be reached is `NODE_LOST`.
    pub fn learn(&self, e: redis::RedisError, node: Node) -> redis::RedisError {
        let Target::Cluster(route) = self else {
            return e;
        };
        let addr = node.map_or(String::new(), |(c, _)| {
            match c.get_connection_info().addr() {
                redis::ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
                _ => String::new(),
            }
        });
        if route.learn(&e, &addr).is_none() && reply_text(&e).is_none() && !e.is_timeout() {
            return crate::route::server_error(redirect::NODE_LOST);
        }
        e
    }
}

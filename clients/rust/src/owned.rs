//! The connection a bound hold (`EPHEMERAL`) lives on: opened for that hold alone (never one the
//! application or the locker's other commands use), in RESP3 so that the redis crate reports its
//! close. The grant, the renewals, extensions and the release go on it; when it closes (a
//! `CLIENT KILL`, a server restart, a reset), the server has released the hold, and the hold is
//! signalled lost at once (`LostReason::ConnectionClosed`), once. While it is open it never stays
//! silent for longer than `KEEPALIVE` (a `PING` then), so the server's `timeout` never closes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};

use crate::core::acquire::{Attempt, Next};
use crate::core::args::{self, Acquire, Mode, Token, Ttl};
use crate::core::durable::Replicas;
use crate::core::error::{reply_text, Error, Result};
use crate::core::lease::LostReason;
use crate::core::reply;
use crate::hold::{HoldState, Shared};
use crate::renewer::{Channel, Keeper};
use crate::COMMAND_TIMEOUT;

/// The longest a bound hold's connection stays silent: the server's `timeout` is in whole
/// seconds, 1 at the least, and closes a connection only once it was idle for longer than that.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(1);

/// Keeps `channel`'s connection busy: a `PING` after `KEEPALIVE` without a request, until the
/// connection is closed or the channel dropped (a task on the current runtime, or else on the
/// renewal thread's).
pub(crate) fn keep_alive(channel: &Arc<Channel>) {
    let channel = Arc::downgrade(channel);
    crate::renewer::spawn(async move {
        loop {
            let Some(at) = channel.upgrade().map(|c| c.last_used() + KEEPALIVE) else {
                return;
            };
            tokio::time::sleep_until(at.into()).await;
            let Some(open) = channel.upgrade() else {
                return;
            };
            if Instant::now() < open.last_used() + KEEPALIVE {
                continue; // a request went out meanwhile
            }
            let Some(mut conn) = open.current().await else {
                return; // closed: the hold ended
            };
            drop(open);
            // No answer is no loss: a connection that is gone says so by closing.
            let ping = redis::cmd("PING");
            let _ =
                tokio::time::timeout(COMMAND_TIMEOUT, ping.query_async::<Value>(&mut conn)).await;
        }
    });
}

/// Watches one owned connection for its close, and tells the hold on it.
#[derive(Default)]
pub(crate) struct Watch {
    hold: OnceLock<(Weak<HoldState>, Arc<Keeper>)>,
    closed: AtomicBool,
}

impl Watch {
    fn closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some((hold, keeper)) = self.hold.get() {
            if let Some(hold) = hold.upgrade() {
                hold.lose(keeper, LostReason::ConnectionClosed);
            }
        }
    }

    /// The connection now carries `hold` (a close before this is reported now).
    pub fn attach(&self, hold: &Shared, keeper: Arc<Keeper>) {
        let _ = self.hold.set((Arc::downgrade(hold), keeper));
        if self.closed.load(Ordering::SeqCst) {
            self.closed();
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

type Node = redis::RedisResult<(redis::Client, bool)>;

impl Target {
    /// The client of the server to open a connection to for `key`, and whether its request
    /// goes after `ASKING`.
    async fn node(&self, key: &[u8]) -> Node {
        match self {
            Target::One(c) => Ok((c.clone(), false)),
            Target::Cluster(route) => route.client_for(key).await,
        }
    }

    /// The error `e` of a send to `node`, as the acquire's decisions take it: on a Cluster, a
    /// redirect is learnt, and a node that could not be reached is `NODE_LOST`.
    fn learn(&self, e: redis::RedisError, node: Node) -> redis::RedisError {
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
            return crate::route::server_error(crate::core::redirect::NODE_LOST);
        }
        e
    }
}

/// Opens a connection of its own to the server of `client` (its settings, in RESP3).
pub(crate) async fn open(
    client: &redis::Client,
) -> redis::RedisResult<(MultiplexedConnection, Arc<Watch>)> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let resp3 = redis::Client::open(info.set_redis_settings(settings))?;
    let watch = Arc::new(Watch::default());
    let seen = watch.clone();
    let config = crate::renewer::unbounded().set_push_sender(move |push: PushInfo| {
        if push.kind == PushKind::Disconnection {
            seen.closed();
        }
        Ok::<(), ()>(())
    });
    let conn = resp3
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    Ok((conn, watch))
}

/// What a bound acquire needs of its lock.
pub(crate) struct Spec<'a> {
    pub name: &'a [u8],
    pub token: &'a Token,
    pub ttl: Ttl,
    pub mode: Mode,
    /// `DATA` (an election's candidate).
    pub data: Option<&'a [u8]>,
}

/// A granted bound hold, before it is scheduled.
pub(crate) struct Granted {
    pub token: Vec<u8>,
    pub fence: u64,
    pub sent: Instant,
    pub channel: Arc<Channel>,
    pub watch: Arc<Watch>,
}

/// A bound grant's acknowledgements (`WAIT` on its connection, after the grant), when the lock
/// asks for them: not enough, and the grant is released, its connection closed, and
/// `Error::NotReplicated` returned.
pub(crate) async fn confirm(
    g: &Granted,
    name: &[u8],
    replicas: Option<Replicas>,
    ttl: Ttl,
) -> Result<()> {
    let Some(r) = replicas else {
        return Ok(());
    };
    let lossy = String::from_utf8_lossy(name).into_owned();
    let (line, bound) = r.wait(Some(std::time::Duration::from_millis(ttl.millis())));
    let answer = g.channel.send(&line, bound, &lossy, "acquire").await;
    let (count, ok) = r.acks(answer.as_ref().ok());
    if ok {
        return Ok(());
    }
    let release = args::release(name, &g.token);
    let _ = g
        .channel
        .send(&release, COMMAND_TIMEOUT, &lossy, "release")
        .await;
    g.channel.close().await;
    Err(r.shortfall(&lossy, count))
}

/// Takes the lock with `EPHEMERAL` on a connection opened for it (a fresh one for each send
/// after a failure; on a Cluster, to the master of the key then); the decisions are the core's,
/// as for any acquire.
pub(crate) async fn acquire(
    target: impl Into<Target>,
    spec: Spec<'_>,
    mut attempt: Attempt,
) -> Result<Option<Granted>> {
    let target = target.into();
    let name = String::from_utf8_lossy(spec.name).into_owned();
    loop {
        let Some(wait) = attempt.wait(Instant::now()) else {
            return Ok(None);
        };
        let line = Acquire {
            name: spec.name,
            token: spec.token,
            ttl: spec.ttl,
            mode: spec.mode,
            ephemeral: true,
            wait,
            data: spec.data,
        }
        .args();
        let bound = Attempt::bound(wait, COMMAND_TIMEOUT);
        let sent = Instant::now();
        let node = target.node(spec.name).await;
        let run = async {
            let (client, asking) = node.clone()?;
            let (mut conn, watch) = open(&client).await?;
            if asking {
                redis::cmd("ASKING").query_async::<()>(&mut conn).await?;
            }
            let v = args::cmd(&line).query_async::<Value>(&mut conn).await?;
            Ok::<_, redis::RedisError>((v, conn, watch))
        };
        let answer = if bound == std::time::Duration::MAX {
            run.await
        } else {
            match tokio::time::timeout(bound, run).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Error::Timeout {
                        name,
                        what: "acquire",
                    })
                }
            }
        };
        let (v, conn, watch) = match answer {
            Ok(x) => x,
            Err(e) => match attempt.failed(target.learn(e, node), &name, Instant::now()) {
                Next::Again => continue,
                Next::Pause(d) => {
                    tokio::time::sleep(d).await;
                    continue;
                }
                Next::NotGranted => return Ok(None),
                Next::Fail(e) => return Err(e),
            },
        };
        let Some((token, fence)) = reply::grant(&v)? else {
            if attempt.wait_on(Instant::now()) {
                continue;
            }
            return Ok(None);
        };
        let channel = Channel::owned(conn);
        keep_alive(&channel);
        let mut sent = sent;
        if attempt.renew_at_once(sent, Instant::now(), spec.ttl.millis()) {
            let renew_sent = Instant::now();
            let line = args::extend(spec.name, &token, spec.ttl);
            match channel
                .send(&line, COMMAND_TIMEOUT, &name, "acquire")
                .await
                .map(|v| reply::one(&v, ""))
            {
                Ok(Ok(true)) => sent = renew_sent,
                Ok(Ok(false)) => continue,
                _ => {}
            }
        }
        return Ok(Some(Granted {
            token,
            fence,
            sent,
            channel,
            watch,
        }));
    }
}

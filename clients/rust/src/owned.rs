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

use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::durable::Replicas;
use crate::core::error::{Error, Result};
use crate::core::lease::LostReason;
use crate::core::take::{self, Step, Take};
use crate::hold::{HoldState, Plan, Shared};
use crate::node_of::Target;
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
    /// The fence of each key (one for a lock of one key).
    pub fences: Vec<u64>,
    pub sent: Instant,
    pub channel: Arc<Channel>,
    pub watch: Arc<Watch>,
}

impl Granted {
    /// The hold of this grant as `plan` says, scheduled with `keeper` and watched for its
    /// connection's close.
    pub fn schedule(self, plan: &Plan, keeper: &Arc<Keeper>) -> Shared {
        let state = plan.schedule(self.token, self.fences[0], self.sent, self.channel, keeper);
        self.watch.attach(&state, keeper.clone());
        state
    }
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
    let (lines, bound) = r.wait(Some(std::time::Duration::from_millis(ttl.millis())));
    let mut answers = Vec::with_capacity(lines.len());
    for line in &lines {
        match g.channel.send(line, bound, &lossy, "acquire").await {
            Ok(v) => answers.push(v),
            Err(_) => break,
        }
    }
    let answer = (answers.len() == lines.len()).then(|| crate::core::durable::joined(answers));
    let (count, ok) = r.acks(answer.as_ref());
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
    attempt: Attempt,
) -> Result<Option<Granted>> {
    let take = Take::one(spec.name, spec.token.clone(), spec.ttl, spec.mode, attempt);
    acquire_as(target, take.ephemeral(spec.data)).await
}

/// Carries out the steps of a bound acquire (`take`, made `ephemeral`), each send on a
/// connection opened for it (on a Cluster, to the master of the keys' slot then: a redirect
/// goes back to the take, which sends again with the time it has left).
pub(crate) async fn acquire_as(
    target: impl Into<Target>,
    mut take: Take,
) -> Result<Option<Granted>> {
    let target = target.into();
    let name = take.label().to_string();
    // The connection of the last reply, and its channel once it carries a grant.
    let mut last: Option<(MultiplexedConnection, Arc<Watch>)> = None;
    let mut channel: Option<(Arc<Channel>, Arc<Watch>)> = None;
    let mut step = take.next(Instant::now());
    loop {
        step = match step {
            Step::Send { line, wait } => {
                channel = None;
                let bound = Attempt::bound(wait, COMMAND_TIMEOUT);
                let node = target.node(&line).await;
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
                        Err(_) => return Err(take.timed_out()),
                    }
                };
                let answer = answer
                    .map(|(v, conn, watch)| {
                        last = Some((conn, watch));
                        (v, None)
                    })
                    .map_err(|e| target.learn(e, node));
                take.answered(answer, Instant::now())
            }
            Step::Pause(d) => {
                tokio::time::sleep(d).await;
                take.next(Instant::now())
            }
            Step::Renew(lines) => {
                let (ch, _) = bind(&mut channel, &mut last)?;
                let mut outcomes = Vec::with_capacity(lines.len());
                for l in &lines {
                    let v = ch.send(l, COMMAND_TIMEOUT, &name, "acquire").await;
                    outcomes.push(take::outcome(v.ok().as_ref()));
                }
                take.renewed(&outcomes, Instant::now())
            }
            Step::Release(line) => {
                let (ch, _) = bind(&mut channel, &mut last)?;
                let _ = ch.send(&line, COMMAND_TIMEOUT, &name, "release").await;
                take.next(Instant::now())
            }
            Step::Done(Ok(Some(g))) => {
                let (channel, watch) = bind(&mut channel, &mut last)?;
                return Ok(Some(Granted {
                    token: g.token,
                    fences: g.fences,
                    sent: g.sent,
                    channel,
                    watch,
                }));
            }
            Step::Done(other) => return other.map(|_| None),
        };
    }
}

/// The channel of the connection that carried the grant (made once, kept alive).
fn bind(
    channel: &mut Option<(Arc<Channel>, Arc<Watch>)>,
    last: &mut Option<(MultiplexedConnection, Arc<Watch>)>,
) -> Result<(Arc<Channel>, Arc<Watch>)> {
    if let Some(bound) = channel {
        return Ok(bound.clone());
    }
    let Some((conn, watch)) = last.take() else {
        return Err(Error::Invalid("a grant without its connection".into()));
    };
    let ch = Channel::owned(conn);
    keep_alive(&ch);
    *channel = Some((ch.clone(), watch.clone()));
    Ok((ch, watch))
}

//! The tokio front end: `Locker`, `Lock` and `Hold` as in the blocking one, awaited. The lease
//! clocks and renewals of a runtime's holds run in one task of that runtime. Commands go on one
//! multiplexed connection of the locker's own; each wait in the server on a connection of its
//! own (dropping the `acquire` future closes it, and the server drops the waiter at once).
//!
//! ```no_run
//! use std::time::Duration;
//! use redislock_client::aio::Locker;
//!
//! # async fn run() -> redislock_client::Result<()> {
//! let locker = Locker::open("redis://127.0.0.1:6379/")?;
//! let hold = locker.lock("lock:report").acquire(Duration::from_secs(5)).await?;
//! println!("holding lock:report with fence {}", hold.fence());
//! hold.release().await?;
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::durable::Follow;
use crate::core::durable::Replicas;
use crate::core::error::{translate, translate_guarded, Error, Result};
use crate::core::locked::{self, Names};
use crate::core::reply::{self, LockInfo};
use crate::core::take::Take;
use crate::hold::{OnLost, Plan, Shared};

mod cluster;
mod election;
mod hold;
mod multi;
mod observe;
mod waited;

use crate::owned;
use crate::renewer::{runtime_keeper, Channel};
use crate::{COMMAND_TIMEOUT, DEFAULT_LEASE};
pub use election::Election;
pub use hold::Hold;
pub use multi::{MultiHold, MultiLock};
pub use observe::Observer;

struct Inner {
    client: redis::Client,
    channel: Arc<Channel>,
    /// On a Cluster: the slot table and the nodes' connections.
    route: Option<Arc<crate::route::Route>>,
}

impl Inner {
    /// A request of a hold: on its own connection if it is bound, else on the locker's.
    async fn send_hold(
        &self,
        hold: &Shared,
        line: &[Vec<u8>],
        bound: Duration,
        what: &'static str,
    ) -> Result<Value> {
        let none = |_: &Value| None;
        let (v, _) = self.send_hold_then(hold, line, bound, what, none).await?;
        Ok(v)
    }

    /// `send_hold`, then the follow-up `then` makes of its reply on the same connection.
    async fn send_hold_then(
        &self,
        hold: &Shared,
        line: &[Vec<u8>],
        bound: Duration,
        what: &'static str,
        then: impl FnOnce(&Value) -> Option<Follow>,
    ) -> Result<(Value, Option<Result<Value>>)> {
        let channel = if hold.channel.is_owned() {
            &hold.channel
        } else {
            &self.channel
        };
        let name = hold.name_lossy();
        match channel.send_then(line, bound, &name, what, then).await {
            Err(Error::Redis(e)) => Err(translate(e, &name, what)),
            other => other,
        }
    }

    /// A guarded write (LOCK.CALL, LOCK.FENCE): its inner reply, or its error untranslated.
    async fn guarded<T: redis::FromRedisValue>(
        &self,
        line: &[Vec<u8>],
        name: &str,
        what: &'static str,
    ) -> Result<T> {
        match self
            .channel
            .send_once(line, COMMAND_TIMEOUT, name, what)
            .await
        {
            Ok(v) => reply::inner(v),
            Err(Error::Redis(e)) => Err(translate_guarded(e, name, what)),
            Err(e) => Err(e),
        }
    }

    async fn send(
        &self,
        line: &[Vec<u8>],
        bound: Duration,
        name: &str,
        what: &'static str,
    ) -> Result<Value> {
        match self.channel.send(line, bound, name, what).await {
            Err(Error::Redis(e)) => Err(translate(e, name, what)),
            other => other,
        }
    }
}

/// The entry point on one server (see the blocking [`crate::Locker`]). Clones share the
/// connections.
#[derive(Clone)]
pub struct Locker {
    inner: Arc<Inner>,
}

impl Locker {
    pub fn new(client: redis::Client) -> Locker {
        Locker {
            inner: Arc::new(Inner {
                channel: Channel::new(client.clone()),
                client,
                route: None,
            }),
        }
    }

    pub fn open<T: redis::IntoConnectionInfo>(url: T) -> Result<Locker> {
        Ok(Locker::new(redis::Client::open(url)?))
    }

    /// The lock `name`: exclusive, a lease of 30 s renewed every third of it.
    pub fn lock(&self, name: impl Into<Vec<u8>>) -> Lock {
        Lock {
            locker: self.clone(),
            name: name.into(),
            ttl: Ttl::from_duration(DEFAULT_LEASE),
            mode: Mode::Exclusive,
            auto_renew: true,
            on_lost: None,
            token: None,
            ephemeral: false,
            durable: Replicas::default(),
            aof_checked: Arc::default(),
        }
    }

    /// `LOCK.INFO name`: `None` when nobody holds it.
    pub async fn info(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let name = name.as_ref();
        let lossy = String::from_utf8_lossy(name);
        let v = self
            .inner
            .send(&args::info(name), COMMAND_TIMEOUT, &lossy, "info")
            .await?;
        reply::info(&v)
    }

    /// Whether anyone holds the lock, or any of several (see the blocking
    /// [`crate::Locker::locked`]).
    pub async fn locked(&self, names: impl Names) -> Result<bool> {
        for name in names.into_names() {
            let lossy = String::from_utf8_lossy(&name);
            let reply = self
                .inner
                .channel
                .send(&args::info(&name), COMMAND_TIMEOUT, &lossy, "info")
                .await;
            if locked::held(reply, &name)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl Locker {
    /// LOCK.FENCE (see the blocking [`crate::Locker::fence`]).
    pub async fn fence<T: redis::FromRedisValue>(
        &self,
        gate: impl AsRef<[u8]>,
        fence: u64,
        command: &redis::Cmd,
    ) -> Result<T> {
        let gate = gate.as_ref();
        let fence_arg = fence.to_string();
        let line = args::guarded_cmd(&[b"LOCK.FENCE", gate, fence_arg.as_bytes()], command);
        self.inner
            .guarded(&line, &String::from_utf8_lossy(gate), "fence")
            .await
    }
}

/// A lock and how to take it (see the blocking [`crate::Lock`]).
#[derive(Clone)]
pub struct Lock {
    locker: Locker,
    name: Vec<u8>,
    ttl: Ttl,
    mode: Mode,
    auto_renew: bool,
    on_lost: Option<OnLost>,
    token: Option<Token>,
    ephemeral: bool,
    durable: Replicas,
    /// `WAITAOF` was found on the server (checked before the first grant that asks for it).
    aof_checked: Arc<AtomicBool>,
}

impl Lock {
    fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    pub async fn info(&self) -> Result<Option<LockInfo>> {
        self.locker.info(&self.name).await
    }

    /// Takes the lock if it is free now (and nobody waits for it): `None` if not.
    pub async fn try_acquire(&self) -> Result<Option<Hold>> {
        self.take(None).await
    }

    /// Takes the lock, waiting in the server up to `wait`; `Error::Busy` if not granted by then.
    pub async fn acquire(&self, wait: Duration) -> Result<Hold> {
        self.take(Some(Instant::now() + wait))
            .await?
            .ok_or_else(|| Error::Busy {
                name: self.name_lossy(),
            })
    }

    async fn take_bound(&self, deadline: Option<Instant>) -> Result<Option<Hold>> {
        let token = self.token.clone().unwrap_or_else(Token::random);
        let spec = owned::Spec {
            name: &self.name,
            token: &token,
            ttl: self.ttl,
            mode: self.mode,
            data: None,
        };
        let Some(g) =
            owned::acquire(self.locker.inner.target(), spec, Attempt::new(deadline)).await?
        else {
            return Ok(None);
        };
        owned::confirm(&g, &self.name, self.durable.asked(), self.ttl).await?;
        let keeper = runtime_keeper();
        let state = g.schedule(&self.plan(), &keeper);
        Ok(Some(Hold {
            state,
            locker: self.locker.clone(),
            keeper,
            done: false,
        }))
    }

    /// What each hold of this lock is given.
    fn plan(&self) -> Plan {
        Plan::one(&self.name, self.ttl)
            .renewed(self.auto_renew, self.on_lost.clone())
            .replicas(self.durable.asked())
    }

    /// Before the first grant that asks for `WAITAOF`: the server must answer it.
    async fn check_aof(&self) -> Result<()> {
        let Some(line) = self.durable.probe() else {
            return Ok(());
        };
        if self.aof_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let name = self.name_lossy();
        let channel = &self.locker.inner.channel;
        let probe = channel.send_about(&self.name, &line, COMMAND_TIMEOUT, &name, "acquire");
        match probe.await {
            Ok(_) => {}
            Err(Error::Redis(e)) => return Err(self.durable.probe_failed(e, &name)),
            Err(e) => return Err(e),
        }
        self.aof_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn take(&self, deadline: Option<Instant>) -> Result<Option<Hold>> {
        self.check_aof().await?;
        if self.ephemeral {
            return self.take_bound(deadline).await;
        }
        let inner = &self.locker.inner;
        let token = self.token.clone().unwrap_or_else(Token::random);
        let take = Take::one(
            &self.name,
            token,
            self.ttl,
            self.mode,
            Attempt::new(deadline),
        )
        .replicas(self.durable.asked());
        let Some(g) = inner.acquire(take).await? else {
            return Ok(None);
        };
        let keeper = runtime_keeper();
        let (channel, plan) = (inner.channel.clone(), self.plan());
        let state = plan.schedule(g.token, g.fences[0], g.sent, channel, &keeper);
        Ok(Some(Hold {
            state,
            locker: self.locker.clone(),
            keeper,
            done: false,
        }))
    }
}

crate::surface::lock_builders!(Lock);
crate::surface::durable_builders!(Lock);

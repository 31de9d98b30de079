//! The blocking front end: `Locker`, `Lock`, `Hold`.

mod cluster;
mod conn;
mod election;
mod hold;
mod multi;
mod observe;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use election::Election;
pub use hold::Hold;
pub use multi::{MultiHold, MultiLock};
pub use observe::Observer;

use crate::core::acquire::Attempt;
use crate::core::args::{self, Mode, Token, Ttl};
use crate::core::durable::Replicas;
use crate::core::error::{translate, translate_guarded, Error, Result};
use crate::core::locked::{self, Names};
use crate::core::reply::{self, LockInfo};
use crate::core::take::Take;
use crate::hold::{OnLost, Plan};
use crate::owned;
use crate::renewer::{blocking_keeper, Channel};
use crate::DEFAULT_LEASE;

pub(crate) struct LockerInner {
    pub(crate) conns: conn::Conns,
    pub(crate) channel: Arc<Channel>,
    /// The bound of a command that has no tighter one.
    pub(crate) timeout: Duration,
}

/// The entry point on one server: its own connections (opened from the client it is given, never
/// the application's), the locks made from it, `info`. Clones share the connections.
#[derive(Clone)]
pub struct Locker {
    inner: Arc<LockerInner>,
}

impl Locker {
    /// A locker on the server `client` connects to.
    pub fn new(client: redis::Client) -> Locker {
        Locker {
            inner: Arc::new(LockerInner {
                channel: Channel::new(client.clone()),
                conns: conn::Conns::new(client),
                timeout: crate::COMMAND_TIMEOUT,
            }),
        }
    }

    /// A locker on the server at `url` (`redis://host:port/`; `?protocol=resp3` for RESP3).
    pub fn open<T: redis::IntoConnectionInfo>(url: T) -> Result<Locker> {
        Ok(Locker::new(redis::Client::open(url)?))
    }

    /// The same server with another bound for each connection and each command that has no
    /// tighter one (default 5 s; a try, `info`, a guarded write): short, for a client that
    /// must not wait on one slow server of several (Redlock). Connections are not shared with
    /// the locker it was made from.
    pub fn with_timeout(&self, timeout: Duration) -> Locker {
        let conns = self.inner.conns.again();
        Locker {
            inner: Arc::new(LockerInner {
                channel: match conns.route() {
                    Some(route) => Channel::routed(route.clone()),
                    None => Channel::new(self.client().clone()),
                },
                conns,
                timeout: timeout.max(Duration::from_millis(1)),
            }),
        }
    }

    /// The client the locker opens its connections from.
    pub fn client(&self) -> &redis::Client {
        self.inner.conns.client()
    }

    /// The lock `name`: exclusive, with a lease of 30 s renewed every third of it, until
    /// changed with its builder methods.
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
    pub fn info(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let name = name.as_ref();
        let v = self
            .inner
            .conns
            .send(&args::info(name), self.inner.timeout)
            .map_err(|e| translate(e, &String::from_utf8_lossy(name), "info"))?;
        reply::info(&v)
    }

    /// Whether anyone holds the lock `names` (one name), or any of `names` (several): asks
    /// the server (`LOCK.INFO` of each in turn). A key holding another type (a plain string)
    /// counts as held.
    pub fn locked(&self, names: impl Names) -> Result<bool> {
        for name in names.into_names() {
            let reply = self
                .inner
                .conns
                .send(&args::info(&name), self.inner.timeout)
                .map_err(Error::Redis);
            if locked::held(reply, &name)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl Locker {
    /// Runs `command` atomically if `fence` is at least the highest fence the gate key `gate`
    /// accepted (LOCK.FENCE), sent once: its reply as the redis crate gives it for the command
    /// sent directly, or its error as an `Error::Redis`; `Error::StaleFence` if a newer fence
    /// passed the gate (nothing ran).
    pub fn fence<T: redis::FromRedisValue>(
        &self,
        gate: impl AsRef<[u8]>,
        fence: u64,
        command: &redis::Cmd,
    ) -> Result<T> {
        let gate = gate.as_ref();
        let fence_arg = fence.to_string();
        let line = args::guarded_cmd(&[b"LOCK.FENCE", gate, fence_arg.as_bytes()], command);
        let v = self
            .inner
            .conns
            .send_once(&line, self.inner.timeout)
            .map_err(|e| translate_guarded(e, &String::from_utf8_lossy(gate), "fence"))?;
        reply::inner(v)
    }
}

/// A lock and how to take it: made by `Locker::lock`, set up with the builder methods, taken
/// with `acquire` or `try_acquire` (any number of times, also from several threads).
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

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("ttl", &self.ttl)
            .field("mode", &self.mode)
            .field("auto_renew", &self.auto_renew)
            .finish()
    }
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// `LOCK.INFO` of this lock.
    pub fn info(&self) -> Result<Option<LockInfo>> {
        self.locker.info(&self.name)
    }

    /// Takes the lock if it is free now (and nobody waits for it): `None` if not.
    pub fn try_acquire(&self) -> Result<Option<Hold>> {
        self.take(None)
    }

    /// Takes the lock, waiting in the server (first come, first served) up to `wait`;
    /// `Error::Busy` if it was not granted by then.
    pub fn acquire(&self, wait: Duration) -> Result<Hold> {
        self.take(Some(Instant::now() + wait))?
            .ok_or_else(|| Error::Busy {
                name: self.name_lossy(),
            })
    }

    fn take_bound(&self, deadline: Option<Instant>) -> Result<Option<Hold>> {
        let inner = &self.locker.inner;
        let token = self.token.clone().unwrap_or_else(Token::random);
        let (target, name, ttl, mode) =
            (inner.conns.target(), self.name.clone(), self.ttl, self.mode);
        let replicas = self.durable.asked();
        let granted = crate::renewer::run_blocking(async move {
            let spec = owned::Spec {
                name: &name,
                token: &token,
                ttl,
                mode,
                data: None,
            };
            let g = owned::acquire(target, spec, Attempt::new(deadline)).await?;
            if let Some(g) = &g {
                owned::confirm(g, &name, replicas, ttl).await?;
            }
            Ok::<_, Error>(g)
        })?;
        let Some(g) = granted else {
            return Ok(None);
        };
        let keeper = blocking_keeper();
        let state = g.schedule(&self.plan(), &keeper);
        Ok(Some(Hold {
            state,
            locker: inner.clone(),
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
    fn check_aof(&self) -> Result<()> {
        let Some(line) = self.durable.probe() else {
            return Ok(());
        };
        if self.aof_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let inner = &self.locker.inner;
        inner
            .conns
            .send_about(&self.name, &line, inner.timeout)
            .map_err(|e| self.durable.probe_failed(e, &self.name_lossy()))?;
        self.aof_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn take(&self, deadline: Option<Instant>) -> Result<Option<Hold>> {
        self.check_aof()?;
        if self.ephemeral {
            return self.take_bound(deadline);
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
        let Some(g) = inner.conns.acquire(take, inner.timeout)? else {
            return Ok(None);
        };
        let keeper = blocking_keeper();
        let (channel, plan) = (inner.channel.clone(), self.plan());
        let state = plan.schedule(g.token, g.fences[0], g.sent, channel, &keeper);
        Ok(Some(Hold {
            state,
            locker: inner.clone(),
            keeper,
            done: false,
        }))
    }
}

crate::surface::lock_builders!(Lock);
crate::surface::durable_builders!(Lock);

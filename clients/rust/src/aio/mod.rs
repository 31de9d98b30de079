//! The tokio front end: `Locker`, `Lock` and `Hold` as in the blocking one, awaited. The lease
//! clocks and renewals of a runtime's holds run in one task of that runtime. Commands go on one
//! multiplexed connection of the locker's own; each wait in the server on a connection of its
//! own (dropping the `acquire` future closes it, and the server drops the waiter at once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::core::acquire::{Attempt, Next};
use crate::core::args::{self, Acquire, Mode, Token, Ttl, Wait};
use crate::core::durable::Replicas;
use crate::core::error::{translate, translate_guarded, Error, Result};
use crate::core::locked::{self, Names};
use crate::core::reply::{self, LockInfo};
use crate::hold::{HoldState, OnLost, Shared};

mod cluster;
mod election;
mod hold;
mod multi;
mod observe;
mod waited;

use crate::lost::Lost;
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
        then: impl FnOnce(&Value) -> Option<(Vec<Vec<u8>>, Duration)>,
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
        match self.channel.send(line, COMMAND_TIMEOUT, name, what).await {
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

    /// A wait, on a connection of its own.
    async fn wait(&self, line: &[Vec<u8>], bound: Duration) -> redis::RedisResult<Option<Value>> {
        let answer = waited::wait(self, line, bound, |_| None).await?;
        Ok(answer.map(|(v, _)| v))
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
            replicas: None,
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
    replicas: Option<Replicas>,
}

impl Lock {
    pub fn ttl(mut self, ttl: Duration) -> Lock {
        self.ttl = Ttl::from_duration(ttl);
        self
    }

    pub fn mode(mut self, mode: Mode) -> Lock {
        self.mode = mode;
        self
    }

    pub fn auto_renew(mut self, on: bool) -> Lock {
        self.auto_renew = on;
        self
    }

    /// Called once per loss, in the runtime's renewal task (keep it short).
    pub fn on_lost(mut self, f: impl Fn(&Lost) + Send + Sync + 'static) -> Lock {
        self.on_lost = Some(Arc::new(f));
        self
    }

    pub fn token(mut self, token: Token) -> Lock {
        self.token = Some(token);
        self
    }

    /// Bind each grant to a connection of its own (see the blocking [`crate::Lock::ephemeral`]).
    pub fn ephemeral(mut self, on: bool) -> Lock {
        self.ephemeral = on;
        self
    }

    /// Grants and extensions acknowledged by `replicas` replicas (see the blocking
    /// [`crate::Lock::replicas`]).
    pub fn replicas(mut self, replicas: u64, timeout: Duration) -> Lock {
        self.replicas = Replicas::new(replicas, timeout);
        self
    }

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
        owned::confirm(&g, &self.name, self.replicas, self.ttl).await?;
        let state = HoldState::new(
            self.name.clone(),
            g.token,
            g.fence,
            self.ttl.millis(),
            g.sent,
            self.auto_renew,
            self.on_lost.clone(),
            g.channel,
        );
        if let Some(r) = self.replicas {
            let _ = state.replicas.set(r);
        }
        let keeper = runtime_keeper();
        keeper.add(&state);
        g.watch.attach(&state, keeper.clone());
        Ok(Some(Hold {
            state,
            locker: self.locker.clone(),
            keeper,
            done: false,
        }))
    }

    async fn take(&self, deadline: Option<Instant>) -> Result<Option<Hold>> {
        if self.ephemeral {
            return self.take_bound(deadline).await;
        }
        let inner = &self.locker.inner;
        let token = self.token.clone().unwrap_or_else(Token::random);
        let name = self.name_lossy();
        let mut attempt = Attempt::new(deadline);
        loop {
            let Some(wait) = attempt.wait(Instant::now()) else {
                return Ok(None);
            };
            let line = Acquire {
                name: &self.name,
                token: &token,
                ttl: self.ttl,
                mode: self.mode,
                ephemeral: false,
                wait,
                data: None,
            }
            .args();
            let sent = Instant::now();
            let lease = Duration::from_millis(self.ttl.millis());
            let then = Replicas::after(self.replicas, true, lease);
            let answer = match wait {
                Wait::No => match inner
                    .channel
                    .send_then(&line, COMMAND_TIMEOUT, &name, "acquire", then)
                    .await
                {
                    Ok((v, acks)) => Ok((v, acks.and_then(|a| a.ok()))),
                    Err(Error::Redis(e)) => Err(e),
                    Err(e) => return Err(e),
                },
                _ => match waited::wait(inner, &line, Attempt::bound(wait, COMMAND_TIMEOUT), then)
                    .await
                {
                    Ok(Some(v)) => Ok(v),
                    Ok(None) => {
                        return Err(Error::Timeout {
                            name,
                            what: "acquire",
                        })
                    }
                    Err(e) => Err(e),
                },
            };
            let (v, acks) = match answer {
                Ok(v) => v,
                Err(e) => match attempt.failed(e, &name, Instant::now()) {
                    Next::Again => continue,
                    Next::Pause(d) => {
                        tokio::time::sleep(d).await;
                        continue;
                    }
                    Next::NotGranted => return Ok(None),
                    Next::Fail(e) => return Err(e),
                },
            };
            let Some((granted, fence)) = reply::grant(&v)? else {
                if attempt.wait_on(Instant::now()) {
                    continue;
                }
                return Ok(None);
            };
            if let Some(r) = self.replicas {
                let (count, ok) = r.acks(acks.as_ref());
                if !ok {
                    let release = args::release(&self.name, &granted);
                    let _ = inner
                        .send(&release, COMMAND_TIMEOUT, &name, "release")
                        .await;
                    return Err(r.shortfall(&name, count));
                }
            }
            let mut sent = sent;
            if attempt.renew_at_once(sent, Instant::now(), self.ttl.millis()) {
                let renew_sent = Instant::now();
                let line = args::extend(&self.name, &granted, self.ttl);
                match inner
                    .send(&line, COMMAND_TIMEOUT, &name, "acquire")
                    .await
                    .map(|v| reply::one(&v, ""))
                {
                    Ok(Ok(true)) => sent = renew_sent,
                    Ok(Ok(false)) => continue,
                    _ => {}
                }
            }
            let state = HoldState::new(
                self.name.clone(),
                granted,
                fence,
                self.ttl.millis(),
                sent,
                self.auto_renew,
                self.on_lost.clone(),
                inner.channel.clone(),
            );
            if let Some(r) = self.replicas {
                let _ = state.replicas.set(r);
            }
            let keeper = runtime_keeper();
            keeper.add(&state);
            return Ok(Some(Hold {
                state,
                locker: self.locker.clone(),
                keeper,
                done: false,
            }));
        }
    }
}

//! What the renewal schedule knows of a hold (both front ends): its identity, lease clock, lost
//! signal and callback, and the channel its renewals go on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::core::durable::Replicas;
use crate::core::lease::{Lease, Leased, LostReason};
use crate::lost::{Lost, LostSignal};
use crate::renewer::Channel;

/// The callback of a loss: runs once per loss, on the renewal thread (blocking) or task (tokio),
/// right after the lost signal is set; keep it short.
pub type OnLost = Arc<dyn Fn(&Lost) + Send + Sync>;

pub(crate) struct HoldState {
    pub id: u64,
    pub name: Vec<u8>,
    /// The keys of a multi-key hold (renewed each in turn); empty for one key (`name`).
    pub keys: Vec<Vec<u8>>,
    pub token: Vec<u8>,
    pub fence: u64,
    pub lease: Mutex<Lease>,
    pub signal: LostSignal,
    pub on_lost: Option<OnLost>,
    pub channel: Arc<Channel>,
    /// The acknowledgements an extension waits for (`WAIT`), set once when the lock asks for
    /// them.
    pub replicas: OnceLock<Replicas>,
}

pub(crate) type Shared = Arc<HoldState>;

/// What a lock gives each of its holds: its key (or keys), the lease, whether it is renewed,
/// the loss callback, the acknowledgements its extensions wait for.
#[derive(Clone)]
pub(crate) struct Plan {
    pub name: Vec<u8>,
    /// The keys of a lock on several keys (empty for one key: `name`).
    pub keys: Vec<Vec<u8>>,
    pub ttl: crate::core::args::Ttl,
    pub auto_renew: bool,
    pub on_lost: Option<OnLost>,
    pub replicas: Option<Replicas>,
}

impl Plan {
    /// The holds of the lock `name`.
    pub fn one(name: &[u8], ttl: crate::core::args::Ttl) -> Plan {
        Plan {
            name: name.to_vec(),
            keys: Vec::new(),
            ttl,
            auto_renew: true,
            on_lost: None,
            replicas: None,
        }
    }

    /// The holds of every key of `names` at once.
    pub fn all(names: &[Vec<u8>], ttl: crate::core::args::Ttl) -> Plan {
        Plan {
            name: crate::core::multi::label(names).into_bytes(),
            keys: names.to_vec(),
            ..Plan::one(b"", ttl)
        }
    }

    pub fn renewed(mut self, auto_renew: bool, on_lost: Option<OnLost>) -> Plan {
        self.auto_renew = auto_renew;
        self.on_lost = on_lost;
        self
    }

    pub fn replicas(mut self, replicas: Option<Replicas>) -> Plan {
        self.replicas = replicas;
        self
    }

    /// The hold of a grant (`token`, the first key's `fence`, its request `sent`), its requests
    /// on `channel`, on `keeper`'s schedule.
    pub fn schedule(
        &self,
        token: Vec<u8>,
        fence: u64,
        sent: Instant,
        channel: Arc<Channel>,
        keeper: &crate::renewer::Keeper,
    ) -> Shared {
        let lease = Lease::new(sent, self.ttl.millis(), self.auto_renew);
        let state = Arc::new(HoldState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: self.name.clone(),
            keys: self.keys.clone(),
            token,
            fence,
            lease: Mutex::new(lease),
            signal: LostSignal::default(),
            on_lost: self.on_lost.clone(),
            channel,
            replicas: OnceLock::new(),
        });
        if let Some(r) = self.replicas {
            let _ = state.replicas.set(r);
        }
        keeper.add(&state);
        state
    }
}

impl Leased for Shared {
    fn lease(&self) -> MutexGuard<'_, Lease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl HoldState {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// Time left on the lease clock.
    pub fn left(self: &Shared) -> Duration {
        self.lease().left(Instant::now())
    }

    /// The hold is lost as of now (found gone, or its connection closed): signalled, once.
    pub fn lose(self: &Shared, keeper: &crate::renewer::Keeper, why: LostReason) {
        let end = {
            let mut lease = self.lease();
            lease.mark_lost(Instant::now(), why).then_some(lease.end)
        };
        if let Some(end) = end {
            keeper.remove(self);
            self.signal_lost(why, end);
            self.close_owned();
        }
    }

    /// `Error::Lost` once the hold ended here (`done`) or was lost.
    pub fn live(self: &Shared, done: bool) -> crate::core::error::Result<()> {
        if done || self.lease().lost.is_some() {
            return Err(crate::core::error::Error::Lost {
                name: self.name_lossy(),
            });
        }
        Ok(())
    }

    /// Carries out an extension's verdict (`core::verdict::extension`) for a request sent at
    /// `sent` with a lease of `ttl_ms`: the lease clock moves, or the hold is lost (found gone).
    pub fn extended(
        self: &Shared,
        keeper: &Arc<crate::renewer::Keeper>,
        sent: Instant,
        ttl_ms: u64,
        verdict: crate::core::error::Result<()>,
    ) -> crate::core::error::Result<()> {
        match &verdict {
            Ok(()) => {
                let moved = {
                    let mut lease = self.lease();
                    (!lease.ended).then(|| lease.extended(sent, ttl_ms))
                };
                if moved.is_some() {
                    keeper.add(self);
                }
            }
            Err(crate::core::error::Error::NotOwner { .. }) => self.lose(keeper, LostReason::Gone),
            Err(_) => {}
        }
        verdict
    }

    /// Ends the hold's schedule for a release: whether the lease clock had given it up.
    pub fn ending(self: &Shared, keeper: &crate::renewer::Keeper) -> bool {
        let lost = {
            let lease = self.lease();
            lease.lost.is_some() || lease.left(Instant::now()).is_zero()
        };
        keeper.remove(self);
        lost
    }

    /// A bound hold's connection has nothing more to carry once the hold ended: closed.
    pub fn close_owned(&self) {
        if self.channel.is_owned() {
            let channel = self.channel.clone();
            crate::renewer::spawn(async move { channel.close().await });
        }
    }

    /// Signals the loss that the lease clock recorded (once: the caller marked it lost).
    pub fn signal_lost(&self, why: LostReason, lease_end: Instant) {
        let lost = Lost {
            name: self.name.clone(),
            fence: self.fence,
            reason: why,
            lease_end,
        };
        if self.signal.set(lost.clone()) {
            if let Some(f) = &self.on_lost {
                // The application's callback failing is its own: the renewals go on.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&lost)));
            }
        }
    }
}

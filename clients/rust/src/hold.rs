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

impl Leased for Shared {
    fn lease(&self) -> MutexGuard<'_, Lease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl HoldState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: Vec<u8>,
        token: Vec<u8>,
        fence: u64,
        ttl_ms: u64,
        sent: Instant,
        auto_renew: bool,
        on_lost: Option<OnLost>,
        channel: Arc<Channel>,
    ) -> Shared {
        Arc::new(HoldState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name,
            keys: Vec::new(),
            token,
            fence,
            lease: Mutex::new(Lease::new(sent, ttl_ms, auto_renew)),
            signal: LostSignal::default(),
            on_lost,
            channel,
            replicas: OnceLock::new(),
        })
    }

    /// The hold of several keys (`name` is their label).
    #[allow(clippy::too_many_arguments)]
    pub fn multi(
        keys: Vec<Vec<u8>>,
        token: Vec<u8>,
        fence: u64,
        ttl_ms: u64,
        sent: Instant,
        auto_renew: bool,
        on_lost: Option<OnLost>,
        channel: Arc<Channel>,
    ) -> Shared {
        let label = crate::core::multi::label(&keys).into_bytes();
        let mut state = HoldState::new(
            label, token, fence, ttl_ms, sent, auto_renew, on_lost, channel,
        );
        Arc::get_mut(&mut state).expect("a new hold").keys = keys;
        state
    }

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

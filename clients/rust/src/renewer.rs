//! The renewals and lease clocks of many holds: a `Keeper` runs the schedule (`core::lease`) as
//! one async loop, sending each renewal as a short task of its own, so that a renewal that hangs
//! (a partitioned server) holds up neither the others nor the lease clocks. The blocking front end
//! runs one keeper for the whole process on one thread (`redislock-renew`, a current-thread
//! runtime); the tokio front end runs one keeper task per runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::core::args::{self, Ttl};
use crate::core::durable::Replicas;
use crate::core::lease::{Leased, LostReason, Renewed, Schedule};
use crate::core::verdict;
use crate::hold::Shared;

/// A multiplexed connection of the client's own. Every request on it is bounded by its caller
/// (a wait reads as long as it waits), so the redis crate's own response timeout (500 ms by
/// default, which would end any wait in the server longer than that) is off.
pub(crate) async fn connect(client: &redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    client
        .get_multiplexed_async_connection_with_config(&unbounded())
        .await
}

/// The settings of the client's multiplexed connections: no response timeout of the crate's.
pub(crate) fn unbounded() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new().set_response_timeout(None)
}

pub(crate) use crate::channel::Channel;

/// One schedule of lease clocks and renewals, and the loop that keeps it.
#[derive(Default)]
pub(crate) struct Keeper {
    schedule: Mutex<Schedule<Shared>>,
    wake: tokio::sync::Notify,
}

impl Keeper {
    fn schedule(&self) -> std::sync::MutexGuard<'_, Schedule<Shared>> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `hold` on the schedule (again, after its lease clock moved).
    pub fn add(&self, hold: &Shared) {
        self.schedule().add(hold.id, hold.clone());
        self.wake.notify_one();
    }

    /// `hold` ended (released): no more renewals, no loss to signal.
    pub fn remove(&self, hold: &Shared) {
        self.schedule().remove(hold.id);
    }

    /// Keeps the schedule: sends renewals when due, signals losses at the lease clock's end.
    pub async fn run(self: Arc<Self>) {
        loop {
            let now = Instant::now();
            let (due, next) = {
                let mut schedule = self.schedule();
                let due = schedule.due(now);
                (due, schedule.next_wake())
            };
            for (_, hold, bound) in due.renew {
                tokio::spawn(renew(self.clone(), hold, bound, now));
            }
            for (_, hold) in due.lost {
                let end = hold.lease().end;
                hold.signal_lost(LostReason::LeaseRanOut, end);
                hold.close_owned();
            }
            match next {
                Some(at) => {
                    let sleep = tokio::time::sleep_until(at.into());
                    tokio::select! {
                        _ = sleep => {}
                        _ = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}

async fn renew_key(hold: &Shared, key: &[u8], ttl_ms: u64, bound: Duration) -> Renewed {
    let line = args::extend(key, &hold.token, Ttl::Px(ttl_ms));
    // With `replicas`, a renewal not acknowledged in time does not count (WAIT after it).
    let replicas = hold.replicas.get().copied();
    let then = Replicas::after(replicas, false, bound);
    let name = hold.name_lossy();
    let answer = hold.channel.send_then(&line, bound, &name, "renewal", then);
    let (answer, acks) = match answer.await {
        Ok((v, acks)) => (Ok(v), acks.and_then(|a| a.ok())),
        Err(e) => (Err(e), None),
    };
    verdict::renewal(answer, acks.as_ref(), replicas)
}

async fn renew(keeper: Arc<Keeper>, hold: Shared, bound: Duration, sent: Instant) {
    let ttl_ms = hold.lease().ttl_ms;
    let outcome = if hold.keys.is_empty() {
        renew_key(&hold, &hold.name, ttl_ms, bound).await
    } else {
        // Each key in turn, within the lease left; stopped at the first key found gone.
        let until = sent + bound;
        let mut outcomes = Vec::with_capacity(hold.keys.len());
        for key in &hold.keys {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let o = renew_key(&hold, key, ttl_ms, left).await;
            outcomes.push(o);
            if o == Renewed::Gone {
                break;
            }
        }
        crate::core::multi::renewal(&outcomes, hold.keys.len())
    };
    let lost = {
        let mut lease = hold.lease();
        let now = Instant::now();
        let gone = lease.renewed(sent, now, outcome);
        (gone && lease.mark_lost(now, LostReason::Gone)).then_some(lease.end)
    };
    match lost {
        Some(end) => {
            keeper.remove(&hold);
            hold.signal_lost(LostReason::Gone, end);
            hold.close_owned();
        }
        None => keeper.add(&hold),
    }
}

/// The keeper of the blocking front end: one for the process, on a thread of its own.
pub(crate) fn blocking_keeper() -> Arc<Keeper> {
    blocking().0.clone()
}

fn blocking() -> &'static (Arc<Keeper>, tokio::runtime::Handle) {
    static KEEPER: OnceLock<(Arc<Keeper>, tokio::runtime::Handle)> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let keeper = Arc::new(Keeper::default());
        let running = keeper.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("redislock-renew".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the renewal thread's runtime");
                let _ = tx.send(rt.handle().clone());
                rt.block_on(running.run());
            })
            .expect("the renewal thread");
        (keeper, rx.recv().expect("the renewal thread's runtime"))
    })
}

/// Runs `work` on the current runtime, or else on the renewal thread's.
pub(crate) fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(work: F) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn(work)),
        Err(_) => drop(blocking().1.spawn(work)),
    }
}

/// Runs `work` on the renewal thread's runtime and waits for it (the blocking front end's
/// requests on a bound hold's own connection, which lives there).
pub(crate) fn run_blocking<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    blocking().1.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv().expect("the renewal thread runs")
}

/// The keeper of the current tokio runtime: one task per runtime, started with its first hold
/// (it ends with the runtime).
pub(crate) fn runtime_keeper() -> Arc<Keeper> {
    static KEEPERS: OnceLock<Mutex<HashMap<tokio::runtime::Id, Weak<Keeper>>>> = OnceLock::new();
    let handle = tokio::runtime::Handle::current();
    let mut keepers = KEEPERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(k) = keepers.get(&handle.id()).and_then(Weak::upgrade) {
        return k;
    }
    keepers.retain(|_, k| k.strong_count() > 0);
    let keeper = Arc::new(Keeper::default());
    keepers.insert(handle.id(), Arc::downgrade(&keeper));
    handle.spawn(keeper.clone().run());
    keeper
}

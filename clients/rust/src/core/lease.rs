//! The lease clock of one hold, and `Schedule`: the lease clocks and renewals of many holds, in
//! the order they come due. No I/O: the front ends carry the renewals out and report back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The local clock counts every lease this much shorter than the server does (a share of the
/// lease plus a constant, as Redlock's clock drift): the two clocks may run at slightly
/// different rates, and the holder must be told of a loss before the server frees the lock.
pub const CLOCK_DRIFT: f64 = 0.01;
pub const CLOCK_SLACK: Duration = Duration::from_millis(2);

/// The conservative local end of a lease of `ttl_ms` set by a request sent at `sent`: the
/// server started it no earlier than that moment.
pub fn lease_end(sent: Instant, ttl_ms: u64) -> Instant {
    let ttl = Duration::from_millis(ttl_ms);
    let cut = ttl.mul_f64(CLOCK_DRIFT) + CLOCK_SLACK;
    sent + ttl.saturating_sub(cut)
}

/// A grant whose reply came so long after its request (a wait in the server) that a lease
/// counted from the request would be short: renew it at once.
pub fn renew_at_once(sent: Instant, received: Instant, ttl_ms: u64) -> bool {
    received.saturating_duration_since(sent) > Duration::from_millis(ttl_ms) / 10
}

/// Why a hold was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// No renewal was answered before the lease clock's end.
    LeaseRanOut,
    /// A renewal found the hold held by no one or another (answered 0, or another type).
    Gone,
    /// The connection the hold was bound to closed: the server released it then.
    ConnectionClosed,
}

/// One hold's lease clock and where its renewals stand.
#[derive(Clone, Debug)]
pub struct Lease {
    pub ttl_ms: u64,
    /// The conservative local end of the lease.
    pub end: Instant,
    pub auto_renew: bool,
    pub next_renew: Instant,
    pub renewing: bool,
    /// Released or lost: nothing more to renew or signal.
    pub ended: bool,
    pub lost: Option<LostReason>,
}

/// What came of a renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewed {
    /// Answered 1: the lease runs again from the request's sending.
    Extended,
    /// Answered 0, or the key holds another type: the hold is gone.
    Gone,
    /// No answer, an error, or not acknowledged as asked: tried again soon.
    Failed,
}

impl Lease {
    pub fn new(sent: Instant, ttl_ms: u64, auto_renew: bool) -> Lease {
        let mut lease = Lease {
            ttl_ms,
            end: sent,
            auto_renew,
            next_renew: sent,
            renewing: false,
            ended: false,
            lost: None,
        };
        lease.extended(sent, ttl_ms);
        lease
    }

    /// Renewals come every third of the lease.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.ttl_ms) / 3
    }

    /// After a failed renewal: soon again, but not in a tight loop.
    pub fn retry_pause(&self) -> Duration {
        (Duration::from_millis(self.ttl_ms) / 20)
            .clamp(Duration::from_millis(10), Duration::from_millis(250))
    }

    /// Time left on the lease clock (zero once it ran out, or the hold was lost).
    pub fn left(&self, now: Instant) -> Duration {
        if self.lost.is_some() {
            return Duration::ZERO;
        }
        self.end.saturating_duration_since(now)
    }

    /// When the schedule must look at the hold next; `None` once it ended.
    pub fn wake(&self) -> Option<Instant> {
        if self.ended {
            None
        } else if self.auto_renew && !self.renewing {
            Some(self.next_renew.min(self.end))
        } else {
            Some(self.end)
        }
    }

    /// A LOCK.EXTEND (or grant) of `ttl_ms` sent at `sent` was answered 1.
    pub fn extended(&mut self, sent: Instant, ttl_ms: u64) {
        self.ttl_ms = ttl_ms;
        self.end = lease_end(sent, ttl_ms);
        self.next_renew = sent + self.period();
    }

    /// A renewal goes out now: how long it may take (the lease left, at least 1 ms).
    pub fn start_renewal(&mut self, now: Instant) -> Duration {
        self.renewing = true;
        self.left(now).max(Duration::from_millis(1))
    }

    /// The outcome of the renewal sent at `sent`: true when the hold is now known gone.
    pub fn renewed(&mut self, sent: Instant, now: Instant, outcome: Renewed) -> bool {
        self.renewing = false;
        if self.ended {
            return false;
        }
        match outcome {
            Renewed::Extended => {
                let ttl = self.ttl_ms;
                self.extended(sent, ttl);
                false
            }
            Renewed::Gone => true,
            Renewed::Failed => {
                self.next_renew = now + self.retry_pause();
                false
            }
        }
    }

    /// Released: no more renewals, no loss to signal.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Lost as of `now`: true the first time only (a loss is signalled once, whichever of the
    /// lease clock, a renewal or the connection tells first). The lease clock stops at `now`
    /// if it had not run out yet.
    pub fn mark_lost(&mut self, now: Instant, why: LostReason) -> bool {
        if self.ended {
            return false;
        }
        self.ended = true;
        self.lost = Some(why);
        self.end = self.end.min(now);
        true
    }
}

/// A scheduled hold: something with a lease clock behind a mutex.
pub trait Leased: Clone {
    fn lease(&self) -> MutexGuard<'_, Lease>;
}

impl Leased for Arc<Mutex<Lease>> {
    fn lease(&self) -> MutexGuard<'_, Lease> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What is due at a moment.
pub struct Due<T> {
    /// Renewals to send now, with how long each may take.
    pub renew: Vec<(u64, T, Duration)>,
    /// Holds whose lease clock ran out (marked lost: to be signalled).
    pub lost: Vec<(u64, T)>,
}

/// The lease clocks and renewals of many holds: a heap of (moment, id), stale entries dropped
/// as they surface.
pub struct Schedule<T: Leased> {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    items: HashMap<u64, (T, Option<Instant>)>,
}

impl<T: Leased> Default for Schedule<T> {
    fn default() -> Self {
        Schedule {
            heap: BinaryHeap::new(),
            items: HashMap::new(),
        }
    }
}

impl<T: Leased> Schedule<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Schedules hold `id` (again, after its moment changed); drops it once it ended.
    pub fn add(&mut self, id: u64, item: T) {
        let when = item.lease().wake();
        let Some(when) = when else {
            self.items.remove(&id);
            return;
        };
        let entry = self.items.entry(id).or_insert((item, None));
        if entry.1 == Some(when) {
            return;
        }
        entry.1 = Some(when);
        self.heap.push(Reverse((when, id)));
        if self.heap.len() > 64 && self.heap.len() > 2 * self.items.len() {
            let live = self
                .items
                .iter()
                .filter_map(|(id, (_, w))| w.map(|w| Reverse((w, *id))));
            self.heap = live.collect();
        }
    }

    /// Hold `id` ended (released): off the schedule.
    pub fn remove(&mut self, id: u64) {
        if let Some((item, _)) = self.items.remove(&id) {
            item.lease().end();
        }
    }

    fn live(&self, when: Instant, id: u64) -> bool {
        matches!(self.items.get(&id), Some((_, Some(w))) if *w == when)
    }

    /// The next moment something is due; `None` when nothing is scheduled.
    pub fn next_wake(&mut self) -> Option<Instant> {
        while let Some(Reverse((when, id))) = self.heap.peek().copied() {
            if self.live(when, id) {
                return Some(when);
            }
            self.heap.pop();
        }
        None
    }

    /// What is due at `now`: renewals to send (marked as going out) and holds lost.
    pub fn due(&mut self, now: Instant) -> Due<T> {
        let mut due = Due {
            renew: Vec::new(),
            lost: Vec::new(),
        };
        while let Some(Reverse((when, id))) = self.heap.peek().copied() {
            if when > now {
                break;
            }
            self.heap.pop();
            if !self.live(when, id) {
                continue;
            }
            let item = self.items[&id].0.clone();
            let mut lease = item.lease();
            if lease.ended {
                drop(lease);
                self.items.remove(&id);
            } else if now >= lease.end {
                lease.mark_lost(now, LostReason::LeaseRanOut);
                drop(lease);
                self.items.remove(&id);
                due.lost.push((id, item));
            } else {
                let bound = lease.start_renewal(now);
                drop(lease);
                self.items.get_mut(&id).expect("scheduled").1 = None;
                self.add(id, item.clone()); // its lease end, while the renewal is out
                due.renew.push((id, item, bound));
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn lease_end_is_conservative() {
        let t = Instant::now();
        assert_eq!(lease_end(t, 1000), t + 988 * MS);
        assert_eq!(lease_end(t, 30000), t + 29698 * MS);
        assert_eq!(lease_end(t, 1), t); // never later than sent + ttl, never before sent
        assert!(!renew_at_once(t, t + 100 * MS, 1000));
        assert!(renew_at_once(t, t + 101 * MS, 1000));
    }

    #[test]
    fn renewals_move_the_clock_from_the_request() {
        let t = Instant::now();
        let mut l = Lease::new(t, 3000, true);
        assert_eq!(l.wake(), Some(t + 1000 * MS));
        let sent = t + 1000 * MS;
        assert_eq!(l.start_renewal(sent), 1968 * MS);
        assert_eq!(l.wake(), Some(l.end)); // while it is out, only the lease end
        assert!(!l.renewed(sent, sent + 500 * MS, Renewed::Extended));
        assert_eq!(l.end, lease_end(sent, 3000));
        assert_eq!(l.next_renew, sent + 1000 * MS);
        l.start_renewal(sent);
        assert!(!l.renewed(sent, sent + 5 * MS, Renewed::Failed));
        assert_eq!(l.next_renew, sent + 5 * MS + l.retry_pause());
        assert!(l.renewed(sent, sent, Renewed::Gone));
    }

    #[test]
    fn a_loss_is_signalled_once() {
        let t = Instant::now();
        let mut l = Lease::new(t, 1000, true);
        assert!(l.mark_lost(t + 10 * MS, LostReason::Gone));
        assert_eq!(l.left(t), Duration::ZERO);
        assert!(!l.mark_lost(t + 20 * MS, LostReason::LeaseRanOut));
        // A renewal answered after the loss changes nothing.
        assert!(!l.renewed(t, t + 30 * MS, Renewed::Gone));
        assert_eq!(l.lost, Some(LostReason::Gone));
        let mut released = Lease::new(t, 1000, true);
        released.end();
        assert!(!released.mark_lost(t, LostReason::ConnectionClosed));
    }

    fn hold(t: Instant, ttl: u64, renew: bool) -> Arc<Mutex<Lease>> {
        Arc::new(Mutex::new(Lease::new(t, ttl, renew)))
    }

    #[test]
    fn schedule_orders_renewals_and_losses() {
        let t = Instant::now();
        let mut s = Schedule::default();
        let a = hold(t, 300, true); // renew at +100
        let b = hold(t, 90, false); // lost at +87.1
        let c = hold(t, 600, true); // renew at +200
        s.add(1, a.clone());
        s.add(2, b.clone());
        s.add(3, c.clone());
        assert_eq!(s.next_wake(), Some(lease_end(t, 90)));
        let due = s.due(lease_end(t, 90));
        assert!(due.renew.is_empty());
        assert_eq!(due.lost.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2]);
        assert_eq!(b.lease().lost, Some(LostReason::LeaseRanOut));
        assert_eq!(s.len(), 2);
        let due = s.due(t + 150 * MS);
        assert_eq!(due.renew.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        let left = a.lease().left(t + 150 * MS);
        assert_eq!(due.renew[0].2, left);
        // While a's renewal is out, the schedule wakes at its lease end.
        assert_eq!(s.next_wake(), Some(t + 200 * MS));
        s.remove(3);
        let end = a.lease().end;
        assert_eq!(s.next_wake(), Some(end));
        // Its renewal never answered: lost at the lease end, once.
        let due = s.due(end);
        assert_eq!(due.lost.len(), 1);
        assert!(s.is_empty());
        assert_eq!(s.next_wake(), None);
        assert!(c.lease().ended);
    }

    #[test]
    fn many_reschedules_stay_small() {
        let t = Instant::now();
        let mut s = Schedule::default();
        let a = hold(t, 3000, true);
        for i in 0..1000u32 {
            a.lease().next_renew = t + i * MS;
            s.add(7, a.clone());
        }
        assert!(s.heap.len() <= 130);
        assert_eq!(s.next_wake(), Some(t + 999 * MS));
    }
}

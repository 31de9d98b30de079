//! The holds' lease ends: the first and the last, the holds whose lease
//! ended, and when the next end must be looked at.

use super::hold::{ended, Hold};
use super::{Body, Holders, NOT_WATCHED};

impl Holders {
    /// The first lease to end.
    pub fn earliest(&self) -> Option<i64> {
        match &self.body {
            Body::Compact(c) => c.first().map(|(_, h, _)| h.expire_at),
            Body::Indexed(x) => x.earliest(),
        }
    }

    /// The last lease to end: the key's own expiry.
    pub fn latest(&self) -> Option<i64> {
        match &self.body {
            Body::Compact(c) => c.last_expire_at(),
            Body::Indexed(x) => x.latest(),
        }
    }

    /// Takes out the next hold whose lease has ended at `now_ms`, if any.
    pub fn pop_ended(&mut self, now_ms: i64) -> Option<(Box<[u8]>, Hold)> {
        let popped = match &mut self.body {
            Body::Compact(c) => {
                let (token, hold, _) = c.first()?;
                if !ended(hold.expire_at, now_ms) {
                    return None;
                }
                let token: Box<[u8]> = token.into();
                *c = c.rebuilt(Some(0), None);
                (token, hold)
            }
            Body::Indexed(x) => x.pop_ended(now_ms)?,
        };
        self.fit();
        Some(popped)
    }

    /// When the next lease end must be looked at (just after it ends), if
    /// that is not already scheduled: the caller schedules it and this
    /// remembers it. `None` when a look is due no later than needed.
    pub fn look_needed(&self) -> Option<i64> {
        let earliest = self.earliest()?;
        let all_end_together = match &self.body {
            // Stops at the first lease that ends later: no full decode.
            Body::Compact(c) => c.iter().all(|(_, h, _)| h.expire_at == earliest),
            Body::Indexed(_) => Some(earliest) == self.latest(),
        };
        if all_end_together {
            // Every lease ends with the last one: the key's own TTL (the
            // latest lease) ends them all, as it ends an exclusive lock, and
            // a look per key would cost more memory than the key. Waiters
            // ask for their own look at that moment.
            return None;
        }
        let at = earliest.saturating_add(1);
        match self.watched_by.get() {
            w if w != NOT_WATCHED && w <= at => None,
            _ => {
                self.watched_by.set(at);
                Some(at)
            }
        }
    }

    /// A scheduled look ran (`next`: the one it set up, if any), or none is
    /// scheduled any more (`None`: the key moved, or its job was dropped).
    pub fn set_watched(&self, next: Option<i64>) {
        self.watched_by.set(next.unwrap_or(NOT_WATCHED));
    }
}

//! Who gets a key: the grant decision for every kind of lock, for a
//! newcomer and for the queue of waiters.
//!
//! The server layer describes the key (who holds it, in which kind) and the
//! requests; this module answers what to grant, re-grant, refuse or leave
//! waiting. It writes nothing.

use super::errors::LockError;
use super::holders::Kind;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The only holder (no option; the write side of a read/write lock).
    Exclusive,
    /// One of any number of read holders (`SHARED`).
    Shared,
    /// One of `limit` places (`LIMIT limit`).
    Place { limit: u32 },
}

impl Want {
    /// The kind a key takes when this request creates it (`None`: the
    /// compact single-owner record).
    pub fn creates(self) -> Option<Kind> {
        match self {
            Want::Exclusive => None,
            Want::Shared => Some(Kind::Shared),
            Want::Place { limit } => Some(Kind::Semaphore { limit }),
        }
    }
}

/// How a key is held, as far as granting goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupancy {
    Free,
    /// One exclusive holder.
    Exclusive,
    /// Read holders (how many does not matter: there is room for any).
    Shared,
    /// `holders` of `limit` places taken.
    Semaphore {
        limit: u32,
        holders: usize,
    },
}

impl Occupancy {
    pub fn of(kind: Kind, holders: usize) -> Occupancy {
        match kind {
            Kind::Shared => Occupancy::Shared,
            Kind::Semaphore { limit } => Occupancy::Semaphore { limit, holders },
        }
    }

    /// The occupancy once `want` is granted to a new holder.
    fn with(self, want: Want) -> Occupancy {
        match (self, want) {
            (Occupancy::Free, Want::Exclusive) => Occupancy::Exclusive,
            (Occupancy::Free, Want::Shared) => Occupancy::Shared,
            (Occupancy::Free, Want::Place { limit }) => Occupancy::Semaphore { limit, holders: 1 },
            (Occupancy::Semaphore { limit, holders }, _) => Occupancy::Semaphore {
                limit,
                holders: holders + 1,
            },
            (o, _) => o,
        }
    }
}

/// What the key's kind is, for an error that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Exclusive or shared holds.
    ReadWrite,
    Semaphore {
        limit: u32,
    },
}

impl LockKind {
    /// The error for a request that does not fit a key of this kind.
    pub fn mismatch(self) -> LockError {
        LockError::KindMismatch {
            semaphore_limit: match self {
                LockKind::ReadWrite => None,
                LockKind::Semaphore { limit } => Some(limit),
            },
        }
    }
}

/// The answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A new hold with a new fence.
    Grant,
    /// The token already holds the key this way: same fence, new lease.
    Regrant,
    /// No room now: wait (or nil).
    Busy,
    /// The request does not fit the key's kind (or semaphore limit).
    Mismatch(LockKind),
    /// The token holds the key in another mode.
    OtherMode,
}

/// The mode a token already holds the key in, if any.
pub type Holding = Option<Want>;

/// The decision for one request on a key, ignoring anyone waiting.
pub fn decide(key: Occupancy, want: Want, holding: Holding) -> Decision {
    let kind = match key {
        Occupancy::Free => return Decision::Grant,
        Occupancy::Exclusive | Occupancy::Shared => LockKind::ReadWrite,
        Occupancy::Semaphore { limit, .. } => LockKind::Semaphore { limit },
    };
    let fits_kind = match (kind, want) {
        (LockKind::ReadWrite, Want::Exclusive | Want::Shared) => true,
        (LockKind::Semaphore { limit }, Want::Place { limit: asked }) => limit == asked,
        _ => false,
    };
    if !fits_kind {
        return Decision::Mismatch(kind);
    }
    match holding {
        Some(held) if held == want => return Decision::Regrant,
        Some(_) => return Decision::OtherMode,
        None => {}
    }
    let room = match (key, want) {
        (Occupancy::Shared, Want::Shared) => true,
        (Occupancy::Semaphore { limit, holders }, _) => holders < limit as usize,
        _ => false,
    };
    if room {
        Decision::Grant
    } else {
        Decision::Busy
    }
}

/// The decision for a newcomer: nobody overtakes the queue, so a request
/// that would be a new hold waits behind anyone already waiting. Re-grants
/// and refusals are answered at once.
pub fn decide_newcomer(key: Occupancy, want: Want, holding: Holding, queued: bool) -> Decision {
    match decide(key, want, holding) {
        Decision::Grant if queued => Decision::Busy,
        d => d,
    }
}

/// What to do with the waiters at the head of a key's queue, in order: the
/// first `Busy` ends the plan (it keeps its place and nobody behind it
/// overtakes). Consecutive shared waiters are granted together, semaphore
/// waiters while places are free.
pub fn plan(key: Occupancy, queue: impl IntoIterator<Item = (Want, Holding)>) -> Vec<Decision> {
    let mut key = key;
    let mut steps = Vec::new();
    for (want, holding) in queue {
        let d = decide(key, want, holding);
        match d {
            Decision::Busy => break,
            Decision::Grant => key = key.with(want),
            Decision::Regrant | Decision::Mismatch(_) | Decision::OtherMode => {}
        }
        steps.push(d);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;
    use Want::*;

    const SEM3: Want = Place { limit: 3 };

    #[test]
    fn a_free_key_goes_to_anyone() {
        for want in [Exclusive, Shared, SEM3] {
            assert_eq!(decide(Occupancy::Free, want, None), Grant);
        }
        assert_eq!(Exclusive.creates(), None);
        assert_eq!(Shared.creates(), Some(Kind::Shared));
        assert_eq!(SEM3.creates(), Some(Kind::Semaphore { limit: 3 }));
    }

    #[test]
    fn read_write_rules() {
        let shared = Occupancy::Shared;
        assert_eq!(decide(shared, Shared, None), Grant);
        assert_eq!(decide(shared, Exclusive, None), Busy);
        assert_eq!(decide(shared, Shared, Some(Shared)), Regrant);
        assert_eq!(decide(shared, Exclusive, Some(Shared)), OtherMode);
        assert_eq!(decide(shared, SEM3, None), Mismatch(LockKind::ReadWrite));
        let excl = Occupancy::Exclusive;
        assert_eq!(decide(excl, Shared, None), Busy);
        assert_eq!(decide(excl, Exclusive, None), Busy);
        assert_eq!(decide(excl, Exclusive, Some(Exclusive)), Regrant);
        assert_eq!(decide(excl, Shared, Some(Exclusive)), OtherMode);
        assert_eq!(decide(excl, SEM3, None), Mismatch(LockKind::ReadWrite));
    }

    #[test]
    fn semaphore_rules() {
        let sem = |holders| Occupancy::Semaphore { limit: 3, holders };
        assert_eq!(decide(sem(2), SEM3, None), Grant);
        assert_eq!(decide(sem(3), SEM3, None), Busy);
        assert_eq!(decide(sem(3), SEM3, Some(SEM3)), Regrant);
        let named = Mismatch(LockKind::Semaphore { limit: 3 });
        assert_eq!(decide(sem(1), Place { limit: 4 }, None), named);
        assert_eq!(decide(sem(1), Place { limit: 2 }, None), named);
        assert_eq!(decide(sem(1), Exclusive, None), named);
        assert_eq!(decide(sem(1), Shared, None), named);
        // A mismatch is named even to a holder.
        assert_eq!(decide(sem(1), Shared, Some(SEM3)), named);
    }

    #[test]
    fn newcomers_never_overtake() {
        let shared = Occupancy::Shared;
        assert_eq!(decide_newcomer(shared, Shared, None, true), Busy);
        assert_eq!(decide_newcomer(shared, Shared, None, false), Grant);
        assert_eq!(decide_newcomer(shared, Shared, Some(Shared), true), Regrant);
        assert_eq!(
            decide_newcomer(shared, SEM3, None, true),
            Mismatch(LockKind::ReadWrite)
        );
        assert_eq!(
            decide_newcomer(Occupancy::Free, Exclusive, None, true),
            Busy
        );
    }

    #[test]
    fn consecutive_readers_are_granted_together_up_to_a_writer() {
        let queue = [
            (Shared, None),
            (Shared, None),
            (Exclusive, None),
            (Shared, None),
        ];
        assert_eq!(plan(Occupancy::Free, queue), [Grant, Grant]);
        assert_eq!(plan(Occupancy::Shared, queue), [Grant, Grant]);
        assert_eq!(plan(Occupancy::Exclusive, queue), []);
        // A writer at the head takes the free key alone.
        let queue = [(Exclusive, None), (Shared, None)];
        assert_eq!(plan(Occupancy::Free, queue), [Grant]);
        assert_eq!(plan(Occupancy::Shared, queue), []);
    }

    #[test]
    fn semaphore_waiters_fill_the_free_places_only() {
        let queue = [(SEM3, None); 5];
        assert_eq!(plan(Occupancy::Free, queue), [Grant, Grant, Grant]);
        let taken = Occupancy::Semaphore {
            limit: 3,
            holders: 2,
        };
        assert_eq!(plan(taken, queue), [Grant]);
        // The head of the queue creates the kind; a waiter that does not fit
        // it is refused, and the next ones still get their turn.
        let queue = [(SEM3, None), (Place { limit: 9 }, None), (SEM3, None)];
        assert_eq!(
            plan(Occupancy::Free, queue),
            [Grant, Mismatch(LockKind::Semaphore { limit: 3 }), Grant]
        );
        let queue = [(SEM3, Some(SEM3)), (Shared, None), (SEM3, None)];
        assert_eq!(
            plan(
                Occupancy::Semaphore {
                    limit: 3,
                    holders: 3
                },
                queue
            ),
            [Regrant, Mismatch(LockKind::Semaphore { limit: 3 })]
        );
    }

    #[test]
    fn a_waiter_holding_another_mode_is_refused_and_the_queue_moves_on() {
        let queue = [(Exclusive, Some(Shared)), (Shared, None)];
        assert_eq!(plan(Occupancy::Shared, queue), [OtherMode, Grant]);
    }
}

//! The builder methods of a lock and the accessors of a hold, one text for both front ends (and
//! for one key and several): they decide nothing and send nothing.

/// `ttl`, `auto_renew`, `on_lost` and `token` of a lock type with those fields.
macro_rules! lock_builders {
    ($lock:ident) => {
        impl $lock {
            /// The lease of each grant, the same on every key (whole milliseconds, at least 1;
            /// default 30 s).
            pub fn ttl(mut self, ttl: std::time::Duration) -> $lock {
                self.ttl = $crate::core::args::Ttl::from_duration(ttl);
                self
            }

            /// Renew the lease every third of it, until released or lost (default: true).
            /// Without, the lease clock still runs, and the hold is signalled lost at its end.
            pub fn auto_renew(mut self, on: bool) -> $lock {
                self.auto_renew = on;
                self
            }

            /// Called once per loss, on the renewal thread (the tokio front end: in the
            /// runtime's renewal task); keep it short.
            pub fn on_lost(mut self, f: impl Fn(&$crate::Lost) + Send + Sync + 'static) -> $lock {
                self.on_lost = Some(std::sync::Arc::new(f));
                self
            }

            /// The owner token of the grants (default: a random 128-bit one per acquire, which
            /// a retried acquire re-grants instead of taking a second hold); `Token::Server`
            /// asks the server to make one (`*`).
            pub fn token(mut self, token: $crate::Token) -> $lock {
                self.token = Some(token);
                self
            }

            /// Bind each grant to a connection opened for it alone (`EPHEMERAL`, on every key):
            /// the grant, renewals, extensions and release go on it; when it closes, the server
            /// releases the hold (every key) at once, and the hold is signalled lost as soon as
            /// the socket reports the close (`LostReason::ConnectionClosed`). A successor may be
            /// granted before that: write with the fence.
            pub fn ephemeral(mut self, on: bool) -> $lock {
                self.ephemeral = on;
                self
            }
        }
    };
}

/// `mode`, `replicas`, `aof_local` and `aof_replicas` of a lock of one key (fields `mode` and
/// `durable`).
macro_rules! durable_builders {
    ($lock:ident) => {
        impl $lock {
            /// Exclusive (the default), shared (`SHARED`) or one place of a semaphore
            /// (`LIMIT n`).
            pub fn mode(mut self, mode: $crate::Mode) -> $lock {
                self.mode = mode;
                self
            }

            /// Report a grant or an extension only once `replicas` replicas acknowledged it
            /// (`WAIT replicas timeout` on its connection, after it; 0, the default, asks
            /// nothing): a grant not acknowledged within `timeout` (nor the lease) is released
            /// and fails with `Error::NotReplicated`, an extension fails with it and leaves the
            /// lease clock where it was; a renewal in the background not acknowledged does not
            /// count for the lease clock. `timeout` bounds `aof_local` and `aof_replicas` too.
            pub fn replicas(mut self, replicas: u64, timeout: std::time::Duration) -> $lock {
                self.durable.replicas = replicas;
                self.durable.timeout = timeout;
                self
            }

            /// Report a grant or an extension only once it is fsynced to the master's AOF as
            /// well (`WAITAOF 1 …` after it, on its connection; Redis 7.2+, Valkey 8+), within
            /// the timeout given to `replicas` (default 1 s): not in time, and it fails with
            /// `Error::NotReplicated` as for `replicas`. Before the first grant the server is
            /// asked whether it can answer `WAITAOF` (`WAITAOF 1 0 1`): where it has none
            /// (Redis 7.0) or `appendonly` is off, the acquire fails with `Error::Unsupported`
            /// and nothing is taken.
            pub fn aof_local(mut self, on: bool) -> $lock {
                self.durable.aof_local = on;
                self
            }

            /// Report a grant or an extension only once `replicas` replicas fsynced it to their
            /// AOF (`WAITAOF … replicas timeout`; 0, the default, asks nothing), as `aof_local`.
            pub fn aof_replicas(mut self, replicas: u64) -> $lock {
                self.durable.aof_replicas = replicas;
                self
            }
        }
    };
}

/// `token`, `is_held`, `lease_left` and `lost` of a hold type with `state` and `done`; with
/// `one`, `fence` and `name` too; with `many` (and `fences`), `names`, `fences` and `fence_of`.
macro_rules! hold_accessors {
    (one $hold:ident) => {
        $crate::surface::hold_accessors!($hold);

        impl $hold {
            /// The fencing token of this grant.
            pub fn fence(&self) -> u64 {
                self.state.fence
            }

            /// The lock's name.
            pub fn name(&self) -> &[u8] {
                &self.state.name
            }
        }
    };
    (many $hold:ident) => {
        $crate::surface::hold_accessors!($hold);

        impl $hold {
            /// The keys, in the order given.
            pub fn names(&self) -> &[Vec<u8>] {
                &self.state.keys
            }

            /// The fence of each key, in the order of the names.
            pub fn fences(&self) -> &[u64] {
                &self.fences
            }

            /// The fence of the key `name`; `None` if it is not one of the keys.
            pub fn fence_of(&self, name: impl AsRef<[u8]>) -> Option<u64> {
                let i = self.names().iter().position(|n| n == name.as_ref())?;
                Some(self.fences[i])
            }
        }
    };
    ($hold:ident) => {
        impl $hold {
            /// The owner token (the same on every key).
            pub fn token(&self) -> &[u8] {
                &self.state.token
            }

            /// Held by the lease clock: the lease's conservative local end has not come, and
            /// the hold was neither lost nor released. Asks nothing of the server.
            pub fn is_held(&self) -> bool {
                !self.done && !self.lease_left().is_zero()
            }

            /// Time left on the lease clock.
            pub fn lease_left(&self) -> std::time::Duration {
                self.state.left()
            }

            /// Set when the hold is lost: a renewal found it (or a key) gone, its lease clock
            /// ran out with no renewal answered, or its bound connection closed. Signalled once
            /// per loss (`hold.lost().wait().await` waits for it in tokio).
            pub fn lost(&self) -> $crate::LostSignal {
                self.state.signal.clone()
            }
        }
    };
}

/// The builder methods and accessors of an election's candidate (fields `name`, `lease`,
/// `data`, `on_lost`, `on_elected`, `on_new_leader`, and `hold`: the term's `Hold`).
macro_rules! election_surface {
    ($election:ident) => {
        impl $election {
            /// The lease of a term (default 10 s): a leader cut off from the server is
            /// signalled lost, and succeeded, within it.
            pub fn lease(mut self, lease: std::time::Duration) -> $election {
                self.lease = $crate::core::args::Ttl::from_duration(lease);
                self
            }

            /// The candidate's public data (1 to 4096 bytes), what observers see while it
            /// leads.
            pub fn data(mut self, data: impl Into<Vec<u8>>) -> $election {
                self.data = Some(data.into());
                self
            }

            /// Called once per loss of leadership, on the renewal thread (the tokio front end:
            /// in the runtime's renewal task).
            pub fn on_lost(
                mut self,
                f: impl Fn(&$crate::Lost) + Send + Sync + 'static,
            ) -> $election {
                self.on_lost = Some(std::sync::Arc::new(f));
                self
            }

            /// `run` calls this with each term it is elected in, before the work (also for a
            /// term that ended already, whose work is not called).
            pub fn on_elected(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> $election {
                self.on_elected = Some(std::sync::Arc::new(f));
                self
            }

            /// `run` calls this with each change of leader an observer of its own sees
            /// (`Some`: a new leader or value; `None`: nobody leads after a leader), from a
            /// thread of the run's own (the tokio front end: a task of the runtime), never after
            /// `run` returned.
            pub fn on_new_leader(
                mut self,
                f: impl Fn(Option<&$crate::Leader>) + Send + Sync + 'static,
            ) -> $election {
                self.on_new_leader = Some(std::sync::Arc::new(f));
                self
            }

            /// The election's name (its lock key).
            pub fn name(&self) -> &[u8] {
                &self.name
            }

            fn label(&self) -> String {
                String::from_utf8_lossy(&self.name).into_owned()
            }

            /// This candidate leads: its term was granted and its lease clock has not run out.
            pub fn is_leader(&self) -> bool {
                self.hold.as_ref().is_some_and(Hold::is_held)
            }

            /// The term this candidate leads in.
            pub fn term(&self) -> Option<u64> {
                self.hold.as_ref().filter(|h| h.is_held()).map(Hold::fence)
            }

            /// Time left on the term's lease clock (zero when not leading).
            pub fn lease_left(&self) -> std::time::Duration {
                self.hold
                    .as_ref()
                    .map_or(std::time::Duration::ZERO, Hold::lease_left)
            }

            /// The lost signal of the last term granted (`None` before the first).
            pub fn lost(&self) -> Option<$crate::LostSignal> {
                self.hold.as_ref().map(Hold::lost)
            }
        }
    };
}

pub(crate) use {durable_builders, election_surface, hold_accessors, lock_builders};

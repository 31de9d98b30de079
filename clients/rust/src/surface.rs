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

pub(crate) use {hold_accessors, lock_builders};

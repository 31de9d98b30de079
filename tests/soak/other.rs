//! The commands that leave the locks alone: closing a slot's connection, an odd call for the
//! parsers, and letting time pass.

use std::time::Duration;

use crate::common::*;

use super::slots::Reply;
use super::{Soak, R};

impl Soak {
    pub fn close_command(&mut self, slot: usize, kill: bool) -> R {
        if self.observing(slot) {
            return self.end_observers(Some(slot));
        }
        if let Some(key) = self.slots[slot].waiting.clone() {
            if self.answered_early(slot, &key)? {
                return Ok(());
            }
        }
        let how = if kill { "CLIENT KILL ID" } else { "close" };
        self.note(format!(
            "slot {slot}: {how} (client {})",
            self.slots[slot].id
        ));
        self.close_slot(slot, kill)
    }

    /// An odd call: whatever it answers (mostly an error), the server stays up, which every
    /// check looks at. A call that blocks is left by closing its connection.
    pub fn odd(&mut self, seed: u64) -> R {
        let mut r = super::gen::Rng::new(seed);
        let cmd = *r.pick(&super::gen::Command::ALL);
        let argv = super::gen::fuzz_argv(&mut r, cmd);
        let conn = self
            .odd
            .get_or_insert_with(|| RawConn::connect(&self.master));
        let _ = conn
            .stream()
            .set_read_timeout(Some(Duration::from_millis(300)));
        conn.send(&argv);
        let reply = conn.read();
        let shown = super::slots::show_argv(&argv);
        match reply {
            Ok(r) => self.note(format!("odd> {shown} -> {}", Reply::of(r))),
            Err(e) => {
                self.note(format!("odd> {shown} -> ({e}: closed)"));
                if let Some(c) = self.odd.take() {
                    c.close();
                }
            }
        }
        Ok(())
    }

    /// Lets time pass up to the next lease end or deadline (at most 150 ms), so that leases
    /// end by themselves and waiters are handed what they free.
    pub fn idle(&mut self) -> R {
        let now = now_ms();
        let next = self
            .model
            .locks
            .values()
            .flat_map(|l| {
                let holds = l.holds.iter().map(|h| h.lease.hi);
                holds.chain(l.queue.iter().map(|w| w.deadline.hi))
            })
            .chain(self.model.observers.iter().map(|o| o.deadline.hi))
            .filter(|&t| t >= now)
            .min()
            .unwrap_or(now + 50)
            .min(now + 150);
        self.note(format!("idle {} ms", next + 1 - now));
        sleep_until_wall_ms(next);
        self.settle_all()
    }
}

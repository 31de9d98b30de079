//! `INFO redislock`: the counters, and what the queue, the bindings and
//! the scheduler hold now.

use std::ffi::c_int;

use redis_module::raw;

use crate::core::lock::ENCODING_VERSION;
use crate::core::release;
use crate::server::{catch_panic, datatype, ephemeral, observing, scheduler, stats, waiting};

/// `INFO redislock`.
pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    catch_panic::callback((), || {
        raw::add_info_section(ctx, None);
        let int = |name: &str, value: i64| {
            raw::add_info_field_long_long(ctx, name, value);
        };
        let text = |name: &str, value: &str| {
            raw::add_info_field_str(ctx, name, value);
        };
        // The release, the encoding of the lock records it writes (the
        // newest, or 3 with `rdb-encoding 3`), those it reads, and the
        // encoding of its RDB aux data.
        text("version", release::VERSION);
        int("rdb_encoding", i64::from(datatype::written_version()));
        text("rdb_encodings_read", &format!("1-{ENCODING_VERSION}"));
        int("rdb_aux_encoding", release::AUX_VERSION as i64);
        int("locks", crate::core::record::live().max(0));
        if for_crash_report == 0 {
            int("waiters", waiting::total() as i64);
            // Waits whose connection closed, whose handle the server still
            // keeps until the module releases it (a batch per timer pass).
            int("waiters_leaving", waiting::leaving::count() as i64);
            // Clients blocked in LOCK.OBSERVE (not waiters: no queue).
            int("observers", observing::total() as i64);
            int("ephemeral_holds", ephemeral::count() as i64);
            // Holds of closed connections whose release is still to come.
            int("ephemeral_pending", ephemeral::orphans() as i64);
            // Work pending in the scheduler (at most one job per lock with
            // waiters and per waiter), and the Redis timers behind it (0 or 1).
            let (jobs, timers) = scheduler::pending();
            int("scheduled_jobs", jobs as i64);
            int("timers", timers as i64);
        }
        for (name, counter) in [
            ("grants", &stats::GRANTS),
            ("regrants", &stats::REGRANTS),
            ("refused", &stats::REFUSED),
            ("releases", &stats::RELEASES),
            ("releases_not_owner", &stats::RELEASES_NOT_OWNER),
            ("extends", &stats::EXTENDS),
            ("extends_not_owner", &stats::EXTENDS_NOT_OWNER),
            ("waits", &stats::WAITS),
            ("handoffs", &stats::HANDOFFS),
            ("lease_ends", &stats::LEASE_ENDS),
            ("wait_timeouts", &stats::WAIT_TIMEOUTS),
            ("observes", &stats::OBSERVES),
            ("observe_timeouts", &stats::OBSERVE_TIMEOUTS),
            ("expired", &stats::EXPIRED),
            ("ephemeral_releases", &stats::EPHEMERAL_RELEASES),
            ("timer_passes", &stats::TIMER_PASSES),
            ("timer_passes_cut", &stats::TIMER_PASSES_CUT),
            ("timer_passes_held", &stats::TIMER_PASSES_HELD),
            ("timer_jobs", &stats::TIMER_JOBS),
            ("calls", &stats::CALLS),
            ("calls_not_owner", &stats::CALLS_NOT_OWNER),
            ("fences_accepted", &stats::FENCES_ACCEPTED),
            ("fences_stale", &stats::FENCES_STALE),
        ] {
            int(name, counter.get() as i64);
        }
    })
}

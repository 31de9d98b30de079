//! The Redis side of the module: registration, commands, the data type,
//! server events, and the small unsafe wrappers they share.

mod blocked;
mod catch_panic;
mod cluster;
mod command;
mod command_docs;
mod commands;
mod config;
mod datatype;
mod dispatch;
mod ephemeral;
mod events;
mod ffi;
mod guarded;
mod held;
mod info;
mod lockops;
mod locks;
mod multi;
mod observing;
mod reply;
mod scheduler;
mod state;
mod stats;
mod waiting;
mod writable;

use redis_module::configuration::ConfigurationFlags;
use redis_module::{raw, redis_module, Context, RedisString, Status};

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // A panic while loading must refuse the load, not abort the server.
    catch_panic::callback(Status::Err, || load(ctx, args))
}

fn load(ctx: &Context, args: &[RedisString]) -> Status {
    // `loadmodule <path> max-ttl 60000 …`: the same settings as redis.conf's
    // `redislock.max-ttl`, applied after it; and `rdb-encoding`, which is
    // only an argument (the type is created with it). Checked before any subscription:
    // Redis 7.0 does not remove a failed module's event subscriptions.
    if let Err(e) = config::apply_module_args(args) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    match datatype::create(ctx.ctx, config::rdb_encoding()) {
        Ok(lock_type) => ffi::use_lock_type(lock_type),
        Err(e) => {
            ctx.log_warning(&format!("redislock: {e}"));
            return Status::Err;
        }
    }
    // A damaged RESTORE payload must be an error reply, not an abort.
    ffi::handle_io_errors(ctx);
    if !dispatch::register(ctx) {
        ctx.log_warning("could not register the commands");
        return Status::Err;
    }
    if !dispatch::register_categories(ctx) {
        ctx.log_warning("could not set the commands' ACL categories");
        return Status::Err;
    }
    state::set_detached_context(ffi::detached_context(ctx));
    scheduler::set_runner(&locks::RUNNER);
    if !cluster::watch_config_changes(ctx) {
        ctx.log_warning("could not watch for cluster configuration changes");
        return Status::Err;
    }
    if !stats::subscribe(ctx) || !events::subscribe(ctx) {
        ctx.log_warning("could not subscribe to key and server events");
        return Status::Err;
    }
    if !dispatch::register_docs(ctx) {
        ctx.log_warning("could not register command docs");
        return Status::Err;
    }
    // Replaces the crate's default INFO handler with the module's section.
    raw::register_info_function(ctx.ctx, Some(info::info));
    Status::Ok
}

redis_module! {
    name: "redislock",
    version: crate::core::release::NUMBER,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    configurations: [
        i64: [
            ["max-ttl", &config::MAX_TTL, 0, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
            ["max-block", &config::MAX_BLOCK, 0, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: false,
    ]
}

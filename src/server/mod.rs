//! The Redis side of the module: registration, commands, the data type,
//! server events, and the small unsafe wrappers they share.

mod commands;
mod datatype;
mod events;
mod ffi;
mod guard;
mod reply;
mod state;
mod waiting;

use redis_module::{redis_module, Context, RedisString, Status};

use datatype::LOCK_TYPE;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if !events::subscribe(ctx) {
        ctx.log_warning("could not subscribe to server events");
        return Status::Err;
    }
    Status::Ok
}

redis_module! {
    name: "redislock",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [LOCK_TYPE],
    init: init,
    commands: [
        ["lock.acquire", commands::acquire, "write deny-oom", 1, 1, 1, ""],
        ["lock.release", commands::release, "write", 1, 1, 1, ""],
        ["lock.extend", commands::extend, "write", 1, 1, 1, ""],
        ["lock.info", commands::info, "readonly fast", 1, 1, 1, ""],
        ["lock._apply", commands::apply, "write", 1, 1, 1, ""],
        ["lock._epoch", commands::epoch, "write", 0, 0, 0, ""],
    ],
    event_handlers: [
        [@GENERIC @EXPIRED @EVICTED: waiting::on_key_event],
    ],
}

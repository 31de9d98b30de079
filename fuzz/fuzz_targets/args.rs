//! Fuzz target `args`: see `redislock_fuzz::args`. Under cargo-fuzz it is a libFuzzer target;
//! built plainly, a seeded random driver (`--iterations N --seed S --secs T`).
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redislock_fuzz::args(data);
});

#[cfg(not(fuzzing))]
fn main() {
    redislock_fuzz::driver::main("args", redislock_fuzz::args, redislock_fuzz::inputs::args);
}

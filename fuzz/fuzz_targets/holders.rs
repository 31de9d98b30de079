//! Fuzz target `holders`: see `redislock_fuzz::holders`. Under cargo-fuzz it is a libFuzzer target;
//! built plainly, a seeded random driver (`--iterations N --seed S --secs T`).
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redislock_fuzz::holders(data);
});

#[cfg(not(fuzzing))]
fn main() {
    redislock_fuzz::driver::main(
        "holders",
        redislock_fuzz::holders,
        redislock_fuzz::inputs::holders,
    );
}

//! Fuzz target `record`: see `redislock_fuzz::record`. Under cargo-fuzz it is a libFuzzer target;
//! built plainly, a seeded random driver (`--iterations N --seed S --secs T`).
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redislock_fuzz::record(data);
});

#[cfg(not(fuzzing))]
fn main() {
    redislock_fuzz::driver::main(
        "record",
        redislock_fuzz::record,
        redislock_fuzz::inputs::record,
    );
}

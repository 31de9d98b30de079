//! Fuzz target `packed`: see `redislock_fuzz::packed`. Under cargo-fuzz it is a libFuzzer target;
//! built plainly, a seeded random driver (`--iterations N --seed S --secs T`).
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redislock_fuzz::packed(data);
});

#[cfg(not(fuzzing))]
fn main() {
    redislock_fuzz::driver::main(
        "packed",
        redislock_fuzz::packed,
        redislock_fuzz::inputs::packed,
    );
}

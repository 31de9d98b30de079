//! Fuzz target `fence`: see `redislock_fuzz::fence`. Under cargo-fuzz it is a libFuzzer target;
//! built plainly, a seeded random driver (`--iterations N --seed S --secs T`).
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redislock_fuzz::fence(data);
});

#[cfg(not(fuzzing))]
fn main() {
    redislock_fuzz::driver::main(
        "fence",
        redislock_fuzz::fence,
        redislock_fuzz::inputs::fence,
    );
}

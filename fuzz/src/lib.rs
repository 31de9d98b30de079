//! Fuzz targets for redislock's pure core, shared by the libFuzzer entry points and by the plain
//! random driver (`driver`, with input generators in `inputs`, built on the command generator
//! in `gen`).
//!
//! Each target takes raw bytes, turns them into calls of the core, and checks properties
//! beyond "does not panic":
//! - `args`: every command's parser against an independent model of the documented argument
//!   rules (which calls are accepted, and what they parse to), and every error text is a
//!   sendable Redis error line;
//! - `record`: `LockRef::decode` and the holders' loaders accept exactly what the module could
//!   have written, and an accepted record round-trips through `Record`, its raw-pointer
//!   hand-over and its stored encoding;
//! - `packed`: a record in one string (encoding version 4) is read as an independent model of
//!   the layout reads it, refused for the same reason, and packs back to the same bytes;
//! - `fence`: the fence clock never issues a fence that is not above every fence issued or
//!   observed before, whatever the grants, observations, merges and epoch changes;
//! - `holders`: the state machine of a shared lock or semaphore (grant decisions, holds in
//!   both their forms, lease ends, looks, plans for waiters) against a plain model.

use redislock::core::limits;

pub mod args;
pub mod driver;
pub mod fence;
pub mod gen;
pub mod holders;
pub mod inputs;
pub mod packed;
pub mod record;

pub use args::args;
pub use fence::fence;
pub use holders::holders;
pub use packed::packed;
pub use record::record;

// `gen` stands alone (tests of the root crate include it by path), so it repeats the core's
// limits; these keep the copies honest.
const _: () = {
    assert!(gen::MAX_TOKEN_LEN == limits::MAX_TOKEN_LEN);
    assert!(gen::MAX_TTL_MS == limits::MAX_TTL_MS);
    assert!(gen::MAX_BLOCK_MS == limits::MAX_BLOCK_MS);
    assert!(gen::MAX_LIMIT == limits::MAX_LIMIT);
    assert!(gen::HOLD_EFFECT_VERSION == limits::HOLD_EFFECT_VERSION);
};

/// A token the module accepts as given: 1 to `MAX_TOKEN_LEN` bytes.
fn token_ok(t: &[u8]) -> bool {
    !t.is_empty() && t.len() <= limits::MAX_TOKEN_LEN
}

#[cfg(test)]
mod tests {
    use redislock::core::args::{
        parse_acquire, parse_call, parse_extend, parse_fence, parse_info, parse_release,
    };
    use redislock::core::effects::{parse_apply, parse_epoch, parse_gate_apply, parse_hold};

    use crate::gen::{self, Command, Rng};

    /// What `gen::well_formed` and `gen::soak_command` promise: the parser accepts it.
    #[test]
    fn well_formed_commands_parse() {
        let mut r = Rng::new(7);
        let keys: [&[u8]; 2] = [b"k1", b"k2"];
        let tokens: [&[u8]; 3] = [b"a", b"*", &[0xff; gen::MAX_TOKEN_LEN]];
        for i in 0..20_000 {
            let (cmd, argv) = if i % 2 == 0 {
                gen::soak_command(&mut r, &keys, &tokens)
            } else {
                let cmd = *r.pick(&Command::ALL);
                (cmd, gen::well_formed(&mut r, cmd, b"k", b"tok"))
            };
            assert_eq!(argv[0], cmd.name().as_bytes());
            let ok = match cmd {
                Command::Acquire => parse_acquire(&argv).is_ok(),
                Command::Extend => parse_extend(&argv).is_ok(),
                Command::Release => parse_release(&argv).is_ok(),
                Command::Info => parse_info(&argv).is_ok(),
                Command::Call => parse_call(&argv).is_ok(),
                Command::Fence => parse_fence(&argv).is_ok(),
                Command::Apply => parse_apply(&argv).is_ok(),
                Command::Hold => parse_hold(&argv).is_ok(),
                Command::Gate => parse_gate_apply(&argv).is_ok(),
                Command::Epoch => parse_epoch(&argv).is_ok(),
            };
            assert!(
                ok,
                "{:?}",
                argv.iter()
                    .map(|a| String::from_utf8_lossy(a))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// Every target survives a short run of its generator (the driver's own loop, minus havoc).
    #[test]
    fn targets_pass_their_generated_inputs() {
        let mut r = Rng::new(11);
        for _ in 0..3_000 {
            crate::args(&crate::inputs::args(&mut r));
            crate::record(&crate::inputs::record(&mut r));
            crate::fence(&crate::inputs::fence(&mut r));
            crate::holders(&crate::inputs::holders(&mut r));
        }
    }
}

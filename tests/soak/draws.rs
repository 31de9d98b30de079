//! A step's fixed supply of random numbers, from the fuzz crate's generator: every step takes
//! the same number of draws whatever it does with them.

use super::gen::Rng;

/// The step's draws, from the fuzz crate's generator.
pub fn draws(rng: &mut Rng) -> Draws {
    let mut v = [0; DRAWS];
    v.iter_mut().for_each(|x| *x = rng.next_u64());
    Draws { v, i: 0 }
}

const DRAWS: usize = 64;

/// A step's fixed supply of random numbers.
pub struct Draws {
    v: [u64; DRAWS],
    i: usize,
}

impl Draws {
    pub fn next(&mut self) -> u64 {
        let x = self.v[self.i % DRAWS];
        self.i += 1;
        x
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// `word` in upper, lower or mixed case (options and command names are case-insensitive).
    pub fn cased(&mut self, word: &str) -> Vec<u8> {
        let bits = self.next();
        word.bytes()
            .enumerate()
            .map(|(i, b)| match bits % 3 {
                0 => b,
                1 => b.to_ascii_lowercase(),
                _ if bits >> (i % 60 + 2) & 1 == 1 => b.to_ascii_lowercase(),
                _ => b,
            })
            .collect()
    }
}

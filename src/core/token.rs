//! Owner tokens: validation, generation and comparison.

pub use super::limits::MAX_TOKEN_LEN;
/// Length of a generated token: 128 random bits as lowercase hex.
pub const GENERATED_TOKEN_LEN: usize = 32;

/// What the client asked for as the owner token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenArg<'a> {
    /// Use these bytes as the token.
    Given(&'a [u8]),
    /// `*`: let the server generate one.
    Generate,
}

impl<'a> TokenArg<'a> {
    /// Checks the length limits; `*` alone means "generate".
    pub fn parse(raw: &'a [u8]) -> Option<Self> {
        match raw {
            b"*" => Some(TokenArg::Generate),
            t if !t.is_empty() && t.len() <= MAX_TOKEN_LEN => Some(TokenArg::Given(t)),
            _ => None,
        }
    }
}

/// 128 bits from a CSPRNG, as 32 lowercase hex characters. `rand`'s
/// `ThreadRng` (ChaCha, seeded from the operating system and reseeded from
/// it periodically and after a fork) costs no system call per token, where
/// reading the OS generator each time did.
pub fn generate() -> [u8; GENERATED_TOKEN_LEN] {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

fn hex(bytes: &[u8; 16]) -> [u8; GENERATED_TOKEN_LEN] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; GENERATED_TOKEN_LEN];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[(b >> 4) as usize];
        out[2 * i + 1] = DIGITS[(b & 0x0f) as usize];
    }
    out
}

/// Compares two tokens in time that depends only on their lengths, so a
/// client cannot learn the holder's token byte by byte from reply timing.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_limits() {
        assert_eq!(TokenArg::parse(b"*"), Some(TokenArg::Generate));
        assert_eq!(TokenArg::parse(b"**"), Some(TokenArg::Given(b"**")));
        assert_eq!(TokenArg::parse(b""), None);
        let max = vec![7u8; MAX_TOKEN_LEN];
        assert_eq!(TokenArg::parse(&max), Some(TokenArg::Given(&max[..])));
        let over = vec![7u8; MAX_TOKEN_LEN + 1];
        assert_eq!(TokenArg::parse(&over), None);
    }

    #[test]
    fn generated_tokens_are_hex_and_distinct() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        for t in [a, b] {
            assert!(t
                .iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)));
        }
    }

    #[test]
    fn hex_encoding() {
        let mut bytes = [0u8; 16];
        bytes[0] = 0xab;
        bytes[15] = 0x0f;
        let h = hex(&bytes);
        assert_eq!(&h[..2], b"ab");
        assert_eq!(&h[30..], b"0f");
    }

    #[test]
    fn comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(same(b"\0\xff", b"\0\xff"));
        // Differences that cancel out under XOR are still differences.
        assert!(!same(&[0, 0], &[1, 1]));
    }
}

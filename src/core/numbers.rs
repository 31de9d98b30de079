//! Numbers in arguments and effects: parsed as strictly as Redis parses
//! its own, and formatted without allocating.

/// Strict decimal like Redis's own parser: optional `-`, no `+`, no leading
/// zeros, no spaces, no overflow.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let digits = raw.strip_prefix(b"-").unwrap_or(raw);
    let leading_zero = digits.len() > 1 && digits[0] == b'0';
    if digits.is_empty() || leading_zero || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if raw == b"-0" {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `n` in decimal, written to the end of `buf` (no allocation: this runs
/// on every replicated grant).
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

pub fn parse_non_negative(raw: &[u8]) -> Option<u64> {
    parse_i64(raw).filter(|&v| v >= 0).map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"1e3",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn decimal_formatting() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 1_700_000_000_000, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}

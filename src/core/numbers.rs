//! Numbers in arguments and effects: parsed as strictly as Redis parses
//! its own, and formatted without allocating.

/// Strict decimal like Redis's own parser: optional `-`, no `+`, no leading
/// zeros, no spaces, no overflow.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let (&first, _) = digits.split_first()?;
    if (first == b'0' && (digits.len() > 1 || negative)) || digits.len() > 19 {
        return None;
    }
    // One pass, accumulating negatively: i64::MIN has no positive twin.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(n)
    } else {
        n.checked_neg()
    }
}

/// `n` in decimal, written to the end of `buf` (no allocation: this runs
/// on every replicated grant; two digits a step, as Redis's own `ll2string`).
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut i = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    &buf[i..]
}

pub fn parse_non_negative(raw: &[u8]) -> Option<u64> {
    parse_i64(raw).filter(|&v| v >= 0).map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules spelled out: strict digits, then the standard parser.
    fn reference(raw: &[u8]) -> Option<i64> {
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

    #[test]
    fn integers_parse_as_the_rules_say() {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for n in [
            i64::MIN,
            i64::MIN + 1,
            -1,
            0,
            1,
            9,
            10,
            i64::MAX - 1,
            i64::MAX,
        ] {
            cases.push(n.to_string().into_bytes());
        }
        cases.extend(
            [
                "-9223372036854775809",
                "9223372036854775808",
                "99999999999999999999",
                "00",
                "-00",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec()),
        );
        // Every string of up to 3 bytes over an alphabet with the edges.
        let alphabet = b"-+0159 a";
        for len in 0..=3u32 {
            for mut code in 0..alphabet.len().pow(len) {
                let mut case = Vec::new();
                for _ in 0..len {
                    case.push(alphabet[code % alphabet.len()]);
                    code /= alphabet.len();
                }
                cases.push(case);
            }
        }
        for case in cases {
            assert_eq!(
                parse_i64(&case),
                reference(&case),
                "{:?}",
                String::from_utf8_lossy(&case)
            );
        }
    }

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
        let powers = (0..20).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1]
        });
        for n in [0, 7, 10, 99, 100, 101, 1_700_000_000_000, u64::MAX]
            .into_iter()
            .chain(powers)
        {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}

//! The release: one number for the module and the clients (`Cargo.toml`'s
//! version), as `MODULE LIST` shows it (major·10000 + minor·100 + patch), and
//! what an RDB file says about the release that wrote it.

/// The release, as `major.minor.patch`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The release as `MODULE LIST` shows it: 0.4.0 → 400, 1.2.3 → 10203.
pub const NUMBER: i32 = number(VERSION);

/// Encoding version of the module's RDB aux data: 1 held the fence clock;
/// 2 puts the writing release's number first; 3 adds the ends still owed
/// (holds of closed connections not released yet). Every later version
/// keeps the release number as its first field, so that an older release
/// can name the release that wrote a file it cannot read.
pub const AUX_VERSION: u64 = 3;

/// `major.minor.patch` as one number; parts past 99 (minor, patch) are
/// clamped so that the order of releases is kept.
pub const fn number(version: &str) -> i32 {
    let bytes = version.as_bytes();
    let mut parts = [0i32; 3];
    let (mut part, mut i) = (0, 0);
    while i < bytes.len() && part < 3 {
        match bytes[i] {
            b'.' => part += 1,
            b @ b'0'..=b'9' => parts[part] = parts[part] * 10 + (b - b'0') as i32,
            _ => break,
        }
        i += 1;
    }
    let minor = if parts[1] > 99 { 99 } else { parts[1] };
    let patch = if parts[2] > 99 { 99 } else { parts[2] };
    parts[0] * 10_000 + minor * 100 + patch
}

/// `number` back as `major.minor.patch`.
pub fn name(number: u64) -> String {
    format!(
        "{}.{}.{}",
        number / 10_000,
        number / 100 % 100,
        number % 100
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_module_list_convention() {
        assert_eq!(number("0.4.0"), 400);
        assert_eq!(number("1.2.3"), 10_203);
        assert_eq!(number("2.10.0-rc1"), 21_000);
        assert_eq!(number(VERSION), NUMBER);
        assert_eq!(name(400), "0.4.0");
        assert_eq!(name(10_203), "1.2.3");
        assert!(number("0.10.0") > number("0.9.9"));
    }
}

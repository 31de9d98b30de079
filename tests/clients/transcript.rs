//! The transcript every example prints, read line by line and checked against the server's own
//! count of the commands the example sent.

use std::process::Command;

use crate::common::*;

use super::run::run_demo;

/// The lines of `out` that start with `prefix`, without it.
fn lines_after<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines().filter_map(|l| l.strip_prefix(prefix)).collect()
}

/// The one line that starts with `prefix`, without it.
#[track_caller]
fn line_after<'a>(out: &'a str, prefix: &str) -> &'a str {
    let found = lines_after(out, prefix);
    assert_eq!(
        found.len(),
        1,
        "expected one line starting with {prefix:?}:\n{out}"
    );
    found[0]
}

/// `name=value` from a line of `key=value` words.
#[track_caller]
fn word<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

#[track_caller]
fn fence(line: &str) -> i64 {
    let f: i64 = word(line, "fence")
        .parse()
        .unwrap_or_else(|_| panic!("fence is not an integer in {line:?}"));
    assert!(f > 0, "fence must be positive: {line:?}");
    f
}

#[track_caller]
fn assert_generated_token(line: &str) {
    let t = word(line, "token");
    assert!(
        t.len() == 32
            && t.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "a generated token is 32 lowercase hex characters: {line:?}"
    );
}

/// Calls of `cmd` in `INFO commandstats`.
fn calls(server: &Server, cmd: &str) -> i64 {
    let stats = server
        .info_field("commandstats", &format!("cmdstat_{cmd}"))
        .unwrap_or_default();
    word(&stats.replace(',', " "), "calls").parse().unwrap()
}

/// Where an example's transcript differs: the stale holder's extend, and the server's counts of
/// LOCK.EXTEND and LOCK.RELEASE.
pub struct Stale {
    extend: &'static str,
    extends: i64,
    releases: i64,
}

/// Plain commands: the stale holder's LOCK.EXTEND is sent, and answered 0.
pub const PLAIN: Stale = Stale {
    extend: "0 (lease lost)",
    extends: 2,
    releases: 4,
};

/// The Rust client: its lease clock ran out, so the extend is refused without a request; the
/// dropped hold's release is sent.
pub const CLIENT: Stale = Stale {
    extend: "lost (LeaseRanOut, nothing sent)",
    extends: 1,
    releases: 5,
};

/// Runs one example against a fresh server and checks its transcript.
pub fn check_example(name: &str, cmd: Command, stale: Stale) {
    let s = Server::start();
    let o = run_demo(&s, name, cmd);
    let out = o.stdout.as_str();
    let context = format!("{}\n{}", o.describe(name), s.log_tail(20));
    assert!(o.success, "{context}");
    assert_eq!(out.lines().last(), Some("demo OK"), "{context}");
    assert!(o.stderr.trim().is_empty(), "{context}");

    // 1. acquire with a generated token, two fenced writes, extend, release.
    let acquired = line_after(out, "acquired: ");
    assert_generated_token(acquired);
    let f = fence(acquired);
    let accepted = lines_after(out, "resource: write with fence ");
    assert!(
        accepted.contains(&format!("{f} accepted (part 1)").as_str())
            && accepted.contains(&format!("{f} accepted (part 2)").as_str()),
        "both writes of the holder are accepted with fence {f}:\n{out}"
    );
    assert!(
        line_after(out, "extended: ").starts_with("1 (ttl "),
        "{out}"
    );
    assert_eq!(line_after(out, "resource holds: "), "part 1, part 2");

    // 2. the lease runs out: B's fence is larger, and A's late write is rejected.
    let a = fence(line_after(out, "holder A acquired: "));
    let b = fence(line_after(out, "holder B acquired: "));
    assert!(a > f && b > a, "fences increase: {f} < {a} < {b}:\n{out}");
    assert!(
        accepted.contains(&format!("{b} accepted (B's report)").as_str()),
        "{out}"
    );
    assert_eq!(
        lines_after(out, "resource: write with fence ")
            .iter()
            .filter(|l| l.contains("rejected"))
            .collect::<Vec<_>>(),
        [&format!("{a} rejected (highest seen {b})").as_str()],
        "exactly A's late write is rejected:\n{out}"
    );
    assert_eq!(line_after(out, "stale holder extend: "), stale.extend);

    // 3. BLOCK: the waiter is queued, then granted on release with a larger fence.
    let h = fence(line_after(out, "holder acquired: "));
    assert!(
        line_after(out, "waiter queued: ").starts_with("waiters=1"),
        "{out}"
    );
    assert_eq!(line_after(out, "holder released: "), "1");
    let granted = line_after(out, "waiter granted: ");
    assert_generated_token(granted);
    let g = fence(granted);
    assert!(h > b && g > h, "fences increase: {b} < {h} < {g}:\n{out}");
    let waited: i64 = granted
        .rsplit_once(" after ")
        .and_then(|(_, ms)| ms.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no wait time in {granted:?}"));
    // The holder releases 200 ms after it saw the waiter queued; BLOCK allows 5000 ms.
    assert!(
        (150..4_900).contains(&waited),
        "the waiter waited {waited} ms:\n{out}"
    );
    assert_eq!(lines_after(out, "released: ").len(), 3, "{out}");

    // The server saw exactly what the transcript tells, and every lock was released.
    assert_eq!(calls(&s, "lock.acquire"), 5, "{context}");
    assert_eq!(calls(&s, "lock.extend"), stale.extends, "{context}");
    assert_eq!(calls(&s, "lock.release"), stale.releases, "{context}");
    let mut c = s.conn();
    assert_eq!(info(&mut c, "demo:report"), None);
    assert_eq!(info(&mut c, "demo:queue"), None);
    assert_eq!(dbsize(&mut c), 0);
}

//! Versions (SPEC "Operations"): one release number, shown by `MODULE LIST` (major·10000 +
//! minor·100 + patch) and `INFO redislock` with the encodings this build reads and writes; a
//! record or an RDB file this build cannot read is refused with a log line that says what was
//! found and what to do.

use crate::common::*;
use crate::restore_fuzz::crc64;
use redis::{Connection, Value};

/// The release as `Cargo.toml` has it.
const RELEASE: &str = env!("CARGO_PKG_VERSION");

fn release_number(version: &str) -> i64 {
    let parts: Vec<i64> = version
        .split('.')
        .map(|p| p.parse().expect("a numeric version"))
        .collect();
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

#[test]
fn module_list_and_info_name_the_release_and_encodings() {
    let s = Server::start();
    let mut c = s.conn();
    let modules = ok(&mut c, &rcmd!("MODULE", "LIST"));
    let Value::Array(modules) = modules else {
        panic!("MODULE LIST: {modules:?}");
    };
    let ours = modules
        .iter()
        .map(field_pairs)
        .find(|m| {
            m.iter()
                .any(|(k, v)| k == b"name" && text(v) == "redislock")
        })
        .expect("redislock in MODULE LIST");
    let ver = ours
        .iter()
        .find(|(k, _)| k == b"ver")
        .map(|(_, v)| as_int(v));
    assert_eq!(ver, Some(release_number(RELEASE)));
    let info = s.info_text("redislock");
    assert_eq!(field(&info, "redislock_version").as_deref(), Some(RELEASE));
    assert_eq!(field(&info, "redislock_rdb_encoding").as_deref(), Some("4"));
    assert_eq!(
        field(&info, "redislock_rdb_encodings_read").as_deref(),
        Some("1-4")
    );
    assert_eq!(
        field(&info, "redislock_rdb_aux_encoding").as_deref(),
        Some("3")
    );
}

/// `payload` (a `DUMP` of a lock) with its record encoding version set to `encver`.
fn with_encoding_version(payload: &[u8], encver: u64) -> Vec<u8> {
    // Type byte, then the module id as a 64-bit RDB length (0x81 and 8 big-endian bytes): the
    // type's name in the high 54 bits, the encoding version in the low 10.
    assert_eq!(payload[1], 0x81, "module id as a 64-bit length");
    let id = u64::from_be_bytes(payload[2..10].try_into().unwrap());
    let mut out = payload.to_vec();
    out[2..10].copy_from_slice(&((id & !1023) | encver).to_be_bytes());
    let body = out.len() - 8;
    let crc = crc64(&out[..body]);
    out[body..].copy_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn a_record_of_a_newer_encoding_is_refused_with_a_log_line_that_says_why() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "lock", b"t", 60_000);
    let payload = as_bytes(&ok(&mut c, &rcmd!("DUMP", "lock")));
    // The same payload with its own version restores: the edit itself is sound.
    let same = with_encoding_version(&payload, 4);
    assert_eq!(same, payload);
    let newer = with_encoding_version(&payload, 5);
    let e = err(&mut c, &rcmd!("RESTORE", "copy", 0, newer.as_slice()));
    assert!(e.contains("Bad data format") || e.starts_with("ERR"), "{e}");
    assert!(!exists(&mut c, "copy"));
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("cannot read a lock of encoding version 5"))
        .unwrap_or_else(|| panic!("no log line for the refused record:\n{}", s.log_tail(20)));
    assert!(
        line.contains(&format!("release {RELEASE} reads versions 1 to 4")),
        "{line}"
    );
}

/// An RDB file whose module data says it was written by a later release, with a later version
/// of that data: the server refuses to start, and the log names both releases before any key.
#[test]
fn an_rdb_file_from_a_newer_release_is_refused_before_any_key_is_read() {
    let mut s = Server::start();
    let mut c: Connection = s.conn();
    grant(&mut c, "lock", b"t", 60_000);
    ok(&mut c, &rcmd!("SAVE"));
    s.stop(Stop::Kill);
    let path = s.dir().join("dump.rdb");
    let mut rdb = std::fs::read(&path).unwrap();
    // The module's aux data: opcode 247, the module id (0x81 + 8 bytes), `when` as a UINT
    // (opcode 2, value 1: before the keys), then its fields, each a UINT: version 3, the
    // release number, ….
    let at = rdb
        .windows(2)
        .enumerate()
        .position(|(i, w)| w[0] == 247 && w[1] == 0x81 && rdb.get(i + 10..i + 12) == Some(&[2, 1]))
        .expect("the module's aux data in the RDB file");
    let fields = at + 12;
    assert_eq!(&rdb[fields..fields + 3], &[2, 3, 2], "aux version 3 first");
    let newer = release_number(RELEASE) + 10_000;
    rdb[fields + 1] = 4;
    // The release number as a 14-bit length (0x40 | high 6 bits, low 8 bits).
    assert_eq!(
        rdb[fields + 3] & 0xc0,
        0x40,
        "release number as a 14-bit length"
    );
    rdb[fields + 3] = 0x40 | (newer >> 8) as u8;
    rdb[fields + 4] = (newer & 0xff) as u8;
    // A zero checksum means "not checked".
    let n = rdb.len();
    rdb[n - 8..].fill(0);
    std::fs::write(&path, &rdb).unwrap();
    s.allow_crash_signs();
    let port = s.port();
    match s.launch(port) {
        Ok(()) => panic!("the server loaded a file from a newer release"),
        Err(LaunchError::PortInUse) => panic!("port {port} taken"),
        Err(LaunchError::Failed(_)) => {}
    }
    let log = s.log();
    let writer = format!("{}.{}.{}", newer / 10_000, newer / 100 % 100, newer % 100);
    assert!(
        log.contains(&format!(
            "written by release {writer} (module data version 4); release {RELEASE}"
        )) && log.contains(&format!("load redislock {writer} or newer")),
        "{}",
        s.log_tail(20)
    );
}

/// The first `key = "value"` line of `section` in a TOML file (enough for pyproject.toml).
fn toml_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == key {
                    return Some(v.trim().trim_matches('"').to_string());
                }
            }
        }
    }
    None
}

/// The versions in release file names (`redislock-1.2.3…`, `redislock_1.2.3_amd64.deb`,
/// `redislock-client-1.2.3.crate`) in `text`.
fn release_files_named(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("redislock") {
        let rest = &text[at + "redislock".len()..];
        let Some(rest) = rest.strip_prefix(['-', '_']) else {
            continue;
        };
        let rest = rest.strip_prefix("client-").unwrap_or(rest);
        let version: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let version = version.trim_end_matches('.');
        if version.split('.').count() == 3 && version.split('.').all(|p| !p.is_empty()) {
            found.push(version.to_string());
        }
    }
    found
}

/// One release number (SPEC "Releases"): `Cargo.toml`'s version, which `MODULE LIST` and
/// `INFO redislock` show (above), is the version of the Python package (`pyproject.toml` and
/// `redislock.__version__`) and of the Node.js package (`package.json`, `package-lock.json` and
/// the package's `version` export) and of the Rust client (`clients/rust/Cargo.toml`, and its
/// entry in `Cargo.lock`); `CHANGELOG.md` has a section for it; all say MIT, whose text is
/// `LICENSE`.
#[test]
fn one_release_number_in_every_package() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let run = |cmd: &mut std::process::Command| {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let pyproject = read("clients/python/pyproject.toml");
    let mut found = vec![(
        "clients/python/pyproject.toml",
        toml_value(&pyproject, "project", "version").unwrap_or_default(),
    )];
    let rust_client = read("clients/rust/Cargo.toml");
    found.push((
        "clients/rust/Cargo.toml",
        toml_value(&rust_client, "package", "version").unwrap_or_default(),
    ));
    let lock = read("Cargo.lock");
    let locked = lock
        .split("[[package]]")
        .find(|p| p.lines().any(|l| l.trim() == "name = \"redislock-client\""))
        .and_then(|p| toml_value(&format!("[p]{p}"), "p", "version"));
    found.push(("Cargo.lock (redislock-client)", locked.unwrap_or_default()));
    let python = std::env::var_os("REDISLOCK_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join("target/pyenv/bin/python"));
    let py = run(std::process::Command::new(&python)
        .env("PYTHONPATH", repo.join("clients/python/src"))
        .args(["-c", "import redislock; print(redislock.__version__)"]));
    found.push(("redislock.__version__", py.trim().to_string()));
    let node = run(std::process::Command::new("node")
        .current_dir(repo.join("clients/node"))
        .args([
            "-p",
            "const lock = require('./package-lock.json'); \
             [require('./package.json').version, lock.version, lock.packages[''].version, \
              String(require('.').version)].join('\\n')",
        ]));
    let node: Vec<&str> = node.lines().collect();
    assert_eq!(node.len(), 4, "{node:?}");
    for (what, v) in [
        "clients/node/package.json",
        "clients/node/package-lock.json",
        "clients/node/package-lock.json (packages[''])",
        "require('redislock').version",
    ]
    .into_iter()
    .zip(node)
    {
        found.push((what, v.to_string()));
    }
    let wrong: Vec<String> = found
        .iter()
        .filter(|(_, v)| v != RELEASE)
        .map(|(what, v)| format!("{what}: {v:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "Cargo.toml has {RELEASE}; these differ: {}",
        wrong.join(", ")
    );
    let changelog = read("CHANGELOG.md");
    assert!(
        changelog.lines().any(|l| l
            .strip_prefix("## ")
            .is_some_and(
                |h| h.split(|c: char| c.is_whitespace() || c == '(').next() == Some(RELEASE)
            )),
        "CHANGELOG.md has no section `## {RELEASE}`"
    );
    // The install instructions name the release files of this release.
    for page in [
        "README.md",
        "docs/clients.md",
        "clients/python/README.md",
        "clients/node/README.md",
    ] {
        let text = read(page);
        let named = release_files_named(&text);
        assert!(
            named.iter().all(|v| v == RELEASE),
            "{page} names release files of {named:?}, not {RELEASE}"
        );
    }
    assert!(read("LICENSE").starts_with("MIT License\n"));
    assert_eq!(env!("CARGO_PKG_LICENSE"), "MIT");
    assert_eq!(
        toml_value(&rust_client, "package", "license").as_deref(),
        Some("MIT")
    );
    assert_eq!(
        toml_value(&pyproject, "project", "license").as_deref(),
        Some("MIT")
    );
    let license = run(std::process::Command::new("node")
        .current_dir(repo.join("clients/node"))
        .args(["-p", "require('./package.json').license"]));
    assert_eq!(license.trim(), "MIT");
}

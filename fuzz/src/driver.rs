//! A plain random driver for the fuzz targets, for machines without cargo-fuzz or nightly:
//! seeded, bounded in iterations and time, reproducible (`--seed`), and it keeps going after a
//! failure so that one finding does not hide the next.
//!
//! `<target> [--iterations N] [--seed S] [--secs T] [--replay FILE]`; prints a
//! `FUZZ-DRIVER-SUMMARY` line and exits 1 if any input failed (each failing input is written to
//! `artifacts/<target>/driver-<case>.bin`, which `--replay` and `cargo fuzz run <target> FILE`
//! both read).

use std::cell::RefCell;
use std::panic;
use std::time::{Duration, Instant};

use crate::gen::Rng;

thread_local! {
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

fn arg_value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn hex(data: &[u8]) -> String {
    let shown: String = data.iter().take(96).map(|b| format!("{b:02x}")).collect();
    if data.len() > 96 {
        format!("{shown}… ({} bytes)", data.len())
    } else {
        shown
    }
}

pub fn main(name: &str, target: fn(&[u8]), gen: fn(&mut Rng) -> Vec<u8>) {
    let args: Vec<String> = std::env::args().collect();
    if let Some(path) = arg_value(&args, "--replay") {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        target(&data);
        println!("{name}: {path} passes");
        return;
    }
    let iterations: u64 = arg_value(&args, "--iterations")
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seed: u64 = arg_value(&args, "--seed")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let limit = arg_value(&args, "--secs")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs_f64);
    eprintln!("{name}: up to {iterations} cases, seed {seed}");

    panic::set_hook(Box::new(|info| {
        let msg = info.to_string();
        LAST_PANIC.with(|p| *p.borrow_mut() = msg);
    }));
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let (mut cases, mut failures) = (0u64, 0u64);
    let artifacts = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("artifacts")
        .join(name);
    for case in 0..iterations {
        if limit.is_some_and(|l| start.elapsed() > l) {
            break;
        }
        let mut input = gen(&mut rng);
        // Havoc now and then: flip, drop or duplicate a few bytes.
        if !input.is_empty() && rng.chance(20) {
            for _ in 0..rng.below(4) + 1 {
                let i = rng.below(input.len() as u64) as usize;
                match rng.below(3) {
                    0 => input[i] ^= 1 << rng.below(8),
                    1 if input.len() > 1 => {
                        input.remove(i);
                    }
                    _ => {
                        let b = input[i];
                        input.insert(i, b);
                    }
                }
            }
        }
        cases += 1;
        if panic::catch_unwind(|| target(&input)).is_err() {
            failures += 1;
            let msg = LAST_PANIC.with(|p| p.borrow().clone());
            if failures <= 5 {
                eprintln!(
                    "{name}: case {case} failed: {msg}\n  input: {}",
                    hex(&input)
                );
                let _ = std::fs::create_dir_all(&artifacts);
                let path = artifacts.join(format!("driver-{case}.bin"));
                if std::fs::write(&path, &input).is_ok() {
                    eprintln!("  saved: {}", path.display());
                }
            }
        }
    }
    let _ = panic::take_hook();
    println!(
        "FUZZ-DRIVER-SUMMARY target={name} cases={cases} seed={seed} secs={:.1} failures={failures}",
        start.elapsed().as_secs_f64()
    );
    if failures > 0 {
        std::process::exit(1);
    }
}

//! The Rust program of docs/clients.md: shown whole on the page, it must be the file, and print
//! what the page shows after it (fences aside).

use crate::common::*;

use super::run::{cargo_example, repo, run_demo};

/// The fenced blocks of `page` after the line `<!-- example: {path} -->`: the program, and the
/// block after the next `<!-- output -->`.
fn shown_program_and_output(page: &str, path: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = page.lines().collect();
    let marker = format!("<!-- example: {path} -->");
    let at = lines
        .iter()
        .position(|l| l.trim() == marker)
        .unwrap_or_else(|| panic!("docs/clients.md shows no {path}"));
    let block = |from: usize| -> (Vec<String>, usize) {
        let open = from
            + lines[from..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap();
        let close = open
            + 1
            + lines[open + 1..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap();
        (
            lines[open + 1..close]
                .iter()
                .map(|l| l.to_string())
                .collect(),
            close + 1,
        )
    };
    let (program, next) = block(at + 1);
    let output_at = next
        + lines[next..]
            .iter()
            .position(|l| l.trim() == "<!-- output -->")
            .unwrap_or_else(|| panic!("docs/clients.md shows no output of {path}"));
    let (output, _) = block(output_at + 1);
    (program.join("\n"), output)
}

/// A line with each fence (an integer of 13 digits or more) replaced by `#`.
fn without_fences(line: &str) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    for c in line.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        out.push_str(if digits.len() >= 13 { "#" } else { &digits });
        digits.clear();
        out.push(c);
    }
    out.pop();
    out.trim_end().to_string()
}

#[test]
fn rust_program_of_the_manual_prints_what_it_shows() {
    let page = std::fs::read_to_string(repo().join("docs/clients.md")).unwrap();
    assert!(
        page.contains("differ on") && page.contains("every run"),
        "docs/clients.md must say that fences differ"
    );
    let (program, output) = shown_program_and_output(&page, "examples/redis_rs.rs");
    let file = std::fs::read_to_string(repo().join("examples/redis_rs.rs")).unwrap();
    assert_eq!(
        program.trim_end(),
        file.trim_end(),
        "docs/clients.md shows examples/redis_rs.rs otherwise: copy it again"
    );
    let s = Server::start();
    let o = run_demo(&s, "redis_rs", cargo_example("redis_rs"));
    assert!(o.success, "{}", o.describe("redis_rs"));
    let got: Vec<String> = o.stdout.lines().map(without_fences).collect();
    let want: Vec<String> = output.iter().map(|l| without_fences(l)).collect();
    assert_eq!(got, want, "the page shows otherwise:\n{}", o.stdout);
    assert!(
        o.stdout
            .lines()
            .next()
            .is_some_and(|l| l != without_fences(l)),
        "a fence is printed"
    );
}

#!/usr/bin/env bash
# Builds the module of an earlier commit for the upgrade tests (tests/upgrade.rs) and prints
# the path of its library:
#
#   scripts/previous-module.sh [REF]      (REF defaults to PREVIOUS_REF below)
#
# The library goes to target/previous/<short-ref>/libredislock.so and is reused once built. The
# source of REF is exported with `git archive` into target/previous/src/<short-ref>, and cargo
# builds it in target/previous/build, shared by every REF, so that another REF rebuilds only
# the module's own crate, not its dependencies. Needs the commit in the clone (not a shallow one) and crates.io for crates not
# yet in cargo's cache; Cargo.lock pins them.
set -euo pipefail

# The last commit of the previous release: move it here at each release.
PREVIOUS_REF=30981b0

root=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-$PREVIOUS_REF}
cargo=${CARGO:-cargo}

if ! short=$(git -C "$root" rev-parse --short "$ref^{commit}" 2>/dev/null); then
    echo "previous-module: no commit $ref in this clone (a shallow clone? git fetch --unshallow)" >&2
    exit 1
fi
out="$root/target/previous/$short/libredislock.so"
if [ -f "$out" ]; then
    echo "$out"
    exit 0
fi

# Exported once per commit.
src="$root/target/previous/src/$short"
if [ ! -f "$src/Cargo.toml" ]; then
    mkdir -p "$root/target/previous/src"
    tmp=$(mktemp -d "$root/target/previous/src/.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    git -C "$root" archive --format=tar "$short" | tar -x -C "$tmp"
    rm -rf "$src"
    mv "$tmp" "$src"
    trap - EXIT
fi

echo "previous-module: building $ref ($short) in target/previous/build" >&2
# The target dir is shared by every REF, and cargo checks a package's files by their times, not
# their path: sources older than the library last built there (git archive dates them at the
# commit) would pass for up to date. Touched, they rebuild this crate; its dependencies stay.
find "$src" -exec touch {} +
"$cargo" build --release --locked --manifest-path "$src/Cargo.toml" \
    --target-dir "$root/target/previous/build" >&2
mkdir -p "$(dirname "$out")"
# Copied under another name first, so a concurrent run never sees half a library.
cp "$root/target/previous/build/release/libredislock.so" "$out.tmp.$$"
mv "$out.tmp.$$" "$out"
echo "$out"

#!/usr/bin/env bash
# Installs ganges and what it needs on a fresh Debian/Ubuntu-like machine:
# - a Rust toolchain (rustup) if cargo is missing;
# - a TrueType font for the text of PNG/SVG plots (fonts-dejavu-core) if none is present;
# - the `ganges` binary, built from this checkout, into ~/.cargo/bin (or $GANGES_PREFIX/bin).
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'install: %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    say "no Rust toolchain; installing one with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
  fi
fi

scripts/ensure-system-deps

prefix="${GANGES_PREFIX:-$HOME/.cargo}"
say "building ganges (release) into $prefix/bin"
cargo install --locked --quiet --path crates/ganges-cli --root "$prefix" --force
case ":$PATH:" in
  *":$prefix/bin:"*) say "done: $(command -v ganges)" ;;
  *) say "done: $prefix/bin/ganges (add $prefix/bin to your PATH)" ;;
esac

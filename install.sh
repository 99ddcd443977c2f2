#!/usr/bin/env bash
# Installs ganges and what it needs on a fresh Debian/Ubuntu-like machine:
# - a Rust toolchain (rustup) if cargo is missing;
# - a TrueType font for the text of PNG/SVG plots (fonts-dejavu-core) if none is present;
# - the `ganges` binary, built from this checkout, into ~/.cargo/bin (or $GANGES_PREFIX/bin);
# - the `ganges` Python package (python/), into the python3 on PATH, where there is one.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'install: %s\n' "$*" >&2; }
caller_path=":$PATH:"   # the PATH `ganges demo` will run with, before we add to ours

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
if command -v python3 >/dev/null 2>&1; then
  say "installing the ganges Python package into $(command -v python3)"
  # A system Python may refuse packages outside its package manager (PEP 668): then the
  # user's site-packages.
  python3 -m pip install --quiet --disable-pip-version-check ./python 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages ./python ||
    say "the Python package did not install; \`pip install ./python\` into your environment installs it"
else
  say "no python3: skipped the Python package (pip install ./python installs it)"
fi
# `./install.sh && ganges demo` runs in the caller's shell, whose PATH this script cannot
# change: where the install folder is not on it (a fresh rustup), link the binary into the
# first folder on PATH that we may write to.
case "$caller_path" in
  *":$prefix/bin:"*) say "done: $prefix/bin/ganges" ;;
  *)
    for dir in /usr/local/bin "$HOME/.local/bin" "$HOME/bin"; do
      case "$caller_path" in *":$dir:"*) ;; *) continue ;; esac
      if [ -w "$dir" ] && ln -sf "$prefix/bin/ganges" "$dir/ganges"; then
        say "done: $dir/ganges (a link to $prefix/bin/ganges)"
        exit 0
      fi
    done
    say "done: $prefix/bin/ganges; add $prefix/bin to your PATH to run it as \`ganges\`"
    exit 1
    ;;
esac

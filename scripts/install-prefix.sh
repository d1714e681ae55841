#!/usr/bin/env bash
# install-prefix.sh PREFIX -- install the built doorbell library for C users:
#   PREFIX/lib/libdoorbell.so, PREFIX/lib/libdoorbell.a
#   PREFIX/include/doorbell.h
#   PREFIX/lib/cmake/doorbell/doorbellConfig{,Version}.cmake  (find_package(doorbell))
# Needs `cargo build --release` first (CARGO_TARGET_DIR is honoured).
# Idempotent: running it again overwrites the same files.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
release="${CARGO_TARGET_DIR:-$root/target}/release"

for f in "$release/libdoorbell.so" "$release/libdoorbell.a" "$root/include/doorbell.h" \
         "$root/cmake/doorbellConfig.cmake" "$root/cmake/doorbellConfigVersion.cmake.in" \
         "$root/Cargo.toml"; do
  if [ ! -f "$f" ]; then
    echo "install-prefix: FAIL: missing $f (run: cargo build --release)" >&2
    exit 1
  fi
done

# The [package] version of Cargo.toml is the package version.
version=$(sed -n '/^\[package\]/,/^\[/ s/^version *= *"\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n1)
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]]; then
  echo "install-prefix: FAIL: no version in $root/Cargo.toml" >&2
  exit 1
fi

install -d "$prefix/lib" "$prefix/include" "$prefix/lib/cmake/doorbell"
install -m 0755 "$release/libdoorbell.so" "$prefix/lib/libdoorbell.so"
install -m 0644 "$release/libdoorbell.a" "$prefix/lib/libdoorbell.a"
install -m 0644 "$root/include/doorbell.h" "$prefix/include/doorbell.h"
install -m 0644 "$root/cmake/doorbellConfig.cmake" "$prefix/lib/cmake/doorbell/doorbellConfig.cmake"
sed "s/@DOORBELL_VERSION@/$version/g" "$root/cmake/doorbellConfigVersion.cmake.in" \
  > "$prefix/lib/cmake/doorbell/doorbellConfigVersion.cmake.tmp"
mv -f "$prefix/lib/cmake/doorbell/doorbellConfigVersion.cmake.tmp" \
  "$prefix/lib/cmake/doorbell/doorbellConfigVersion.cmake"

# If the library ever gets a SONAME other than its file name, the dynamic
# loader looks for that name: provide it.
soname=$(readelf -d "$prefix/lib/libdoorbell.so" 2>/dev/null \
  | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [ -n "$soname" ] && [ "$soname" != libdoorbell.so ]; then
  ln -sfn libdoorbell.so "$prefix/lib/$soname"
fi

echo "install-prefix: installed doorbell $version into $prefix"

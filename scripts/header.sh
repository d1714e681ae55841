#!/usr/bin/env bash
# scripts/header.sh (make header) -- regenerate include/doorbell.h from the
# C ABI.  build.rs writes the header into cargo's OUT_DIR only, so an
# ordinary build leaves the tree untouched; this copies it into include/.
# tests/header.rs (make test) fails while the committed header differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out_dir=$(cargo build --release --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    pid = m.get("package_id", "")
    if m.get("reason") == "build-script-executed" and ("#doorbell@" in pid or pid.startswith("doorbell ")):
        print(m["out_dir"])
')
[[ -n $out_dir && -f $out_dir/doorbell.h ]] || { echo "header.sh: cargo reported no doorbell.h" >&2; exit 1; }
if cmp -s "$out_dir/doorbell.h" include/doorbell.h; then
    echo "include/doorbell.h is current"
else
    cp "$out_dir/doorbell.h" include/doorbell.h
    echo "include/doorbell.h regenerated: commit it"
fi

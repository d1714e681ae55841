#!/usr/bin/env bash
# fi/tests/in_tmpfs.sh SIZE DIR CMD... -- run CMD with a tmpfs of SIZE
# mounted at DIR, in a private mount namespace (needs root: it re-executes
# itself under `unshare -m`), so nobody else sees the mount and it goes
# with CMD.  Afterwards writes the number of entries CMD left in DIR to
# DIR.left (outside the mount) and exits with CMD's status.
set -u
if [[ ${IN_TMPFS_NS:-} != 1 ]]; then
    IN_TMPFS_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
size=$1 dir=$2
shift 2
mkdir -p "$dir" && mount -t tmpfs -o "size=$size" tmpfs "$dir" || exit 97
"$@"
rc=$?
ls -A "$dir" | wc -l >"$dir.left"
exit $rc

#!/usr/bin/env bash
# rsh-agent.sh [ssh-style options] HOST COMMAND...
#
# Stand-in for ssh, given to mpirun with `--mca plm_rsh_agent <this file>`:
# runs COMMAND (the orted launch line) "on" HOST by entering HOST's network and
# UTS namespaces (see cluster.sh).  Like ssh, the words of COMMAND are joined
# and interpreted by a shell, because Open MPI builds a shell command line
# (PATH=...; export PATH; ... orted ...).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Skip ssh-style options Open MPI may pass (e.g. -x); none take an argument
# except the ones listed.
while [[ $# -gt 0 && $1 == -* ]]; do
  case "$1" in
    -l|-p|-o|-i|-F) shift 2 ;;
    *) shift ;;
  esac
done
[[ $# -ge 2 ]] || { echo "rsh-agent.sh: usage: rsh-agent.sh HOST COMMAND..." >&2; exit 255; }

host=${1#*@}   # drop a user@ prefix
shift
case "$host" in
  nodeA|nodeB) ;;
  *) echo "rsh-agent.sh: unknown host '$host' (only nodeA/nodeB exist)" >&2; exit 255 ;;
esac

exec "$here/cluster.sh" exec "$host" /bin/sh -c "$*"

#!/usr/bin/env bash
# Two-node mode of the Open MPI benchmark on this one machine: brings up the
# network-namespace cluster of mpi-tests/netns (nodeA, nodeB, one veth pair),
# runs bench/ompi/run.sh with MODE=twonode from inside nodeA (one rank per
# node: self,vader,tcp against doorbell in poll, adaptive and block modes),
# and always tears the cluster down.  Needs root.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER=$ROOT/mpi-tests/netns/cluster.sh
AGENT=$ROOT/mpi-tests/netns/rsh-agent.sh
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
"$CLUSTER" up
SUBNET=$("$CLUSTER" subnet)
"$CLUSTER" exec nodeA env MODE=twonode ${QUICK:+QUICK=$QUICK} ${ROUNDS:+ROUNDS=$ROUNDS} \
  MPIRUN_EXTRA="--host nodeA:1,nodeB:1 --mca plm_rsh_agent $AGENT --mca oob_tcp_if_include $SUBNET --mca btl_tcp_if_include $SUBNET --mca btl_doorbell_if_include $SUBNET" \
  bash "$ROOT/bench/ompi/run.sh"

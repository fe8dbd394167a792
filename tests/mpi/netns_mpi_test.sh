#!/usr/bin/env bash
# MPI across two hosts for real: two network namespaces joined by a veth pair;
# mpirun in the first starts two ranks in each, entering the namespaces
# through an rsh agent that runs `ip netns exec NS` where mpirun would run
# ssh. MPI's TCP transport only (no shared memory between the "hosts"), bound
# to the veth's subnet. The conformance suite must pass across them.
#
# Usage: netns_mpi_test.sh MPIEXEC PROGRAM
# Exit 0: passed; 77: skipped (the reason is printed); anything else: failed.
# Everything it creates (namespaces, veth, temp dirs) is removed on exit. It
# uses only 10.232.X.1-2/24 inside its own namespaces.
set -uo pipefail

mpiexec=${1:?usage: netns_mpi_test.sh MPIEXEC PROGRAM}
prog=${2:?usage: netns_mpi_test.sh MPIEXEC PROGRAM}

# shellcheck source=../support/netns_pair.sh
source "$(dirname "$0")/../support/netns_pair.sh"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
netns_pair_setup mpi 10.232

# The rsh agent: mpirun calls it as `AGENT HOST COMMAND...`, the command
# written for a remote shell. Each "host" also gets its own host name (a UTS
# namespace), as two machines would have.
cat >"$work/agent.sh" <<AGENT
#!/bin/sh
host=\$1
shift
case \$host in
  $addr_b) ns=$ns_b; name=dtmpi-host-b ;;
  *) ns=$ns_a; name=dtmpi-host-a ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
AGENT
chmod +x "$work/agent.sh"

echo "== the conformance suite across the two namespaces (2 + 2 ranks)"
ip netns exec "$ns_a" unshare --uts sh -c "hostname dtmpi-host-a; exec \"\$0\" \"\$@\"" \
  "$mpiexec" -n 4 --host "$addr_a:2,$addr_b:2" --display-map \
  --mca plm_rsh_agent "$work/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl self,tcp --mca btl_tcp_if_include "10.232.$subnet.0/24" \
  --mca oob_tcp_if_include "10.232.$subnet.0/24" \
  -x DTENSOR_TIMEOUT=30 -x OMP_NUM_THREADS=1 -x DTENSOR_LOG_LEVEL=warn \
  "$prog" >"$work/out" 2>&1
rc=$?
cat "$work/out"
[[ $rc -eq 0 ]] || fail "mpirun exited $rc"
# mpirun's job map: two ranks really ran in the second namespace.
grep -q "Data for node: $addr_b.*Num procs: 2" "$work/out" || fail "no ranks ran in $ns_b"
[[ $(grep -c "All tests passed" "$work/out") -eq 4 ]] || fail "not every rank passed"
echo "PASS"

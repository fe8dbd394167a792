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

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"

id=$$
ns_a=dtmpi-a-$id
ns_b=dtmpi-b-$id
veth_a=dtma$((id % 100000))
veth_b=dtmb$((id % 100000))
subnet=$((id % 250 + 1))
addr_a=10.232.$subnet.1
addr_b=10.232.$subnet.2
work=$(mktemp -d "${TMPDIR:-/tmp}/dtensor-netns-mpi-XXXXXX")

cleanup() {
  local rc=$?
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  rm -rf "$work"
  if ip netns list 2>/dev/null | grep -q "dtmpi-[ab]-$id"; then echo "cleanup: namespaces left"; rc=1; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns_a" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
ip netns add "$ns_b" || fail "second namespace"
ip link add "$veth_a" type veth peer name "$veth_b" 2>"$work/err" ||
  skip "cannot create a veth pair: $(cat "$work/err")"
ip link set "$veth_a" netns "$ns_a" || fail "move veth a"
ip link set "$veth_b" netns "$ns_b" || fail "move veth b"
ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a" || fail "address a"
ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b" || fail "address b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "lo up"; done
ip -n "$ns_a" link set "$veth_a" up || fail "veth a up"
ip -n "$ns_b" link set "$veth_b" up || fail "veth b up"

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

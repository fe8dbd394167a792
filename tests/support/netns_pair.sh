# Two "hosts" for the tests that need real TCP between machines: two network
# namespaces joined by a veth pair. Sourced by a test script (bash), which
# then calls
#
#   netns_pair_setup TAG NET
#
# TAG (3 letters) names what it creates: namespaces dtTAG-a-PID and
# dtTAG-b-PID, interfaces dtXa/dtXb + PID digits (X: TAG's first letter;
# interface names are limited to 15 characters). NET is the first two octets
# of the addresses; the pair gets NET.S.1 and NET.S.2/24 with S from the PID,
# so parallel runs never collide. Sets ns_a, ns_b, veth_a, veth_b, subnet,
# addr_a, addr_b and work (a temp dir).
#
# Everything it creates is removed on exit, success or not; a script that
# starts more (a server) defines netns_before_cleanup to stop it first.
# Leftover namespaces fail the test: they would be a bug of the script.
# Exit codes: skip (77, with the reason) where namespaces cannot be made
# here; fail (1) on anything else.

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

_netns_pair_cleanup() {
  local rc=$?
  if declare -F netns_before_cleanup >/dev/null; then netns_before_cleanup; fi
  # Any rank or launcher still running in our namespaces.
  local ns pid
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  ip netns del "$ns_a" 2>/dev/null # takes its end of the veth pair (and so both) with it
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  rm -rf "$work"
  if ip netns list 2>/dev/null | grep -q "^\($ns_a\|$ns_b\)\b"; then
    echo "cleanup: namespaces left"
    rc=1
  fi
  exit $rc
}

netns_pair_setup() {
  local tag=$1 net=$2 id=$$
  [[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
  command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
  ns_a=dt$tag-a-$id
  ns_b=dt$tag-b-$id
  veth_a=dt${tag:0:1}a$((id % 100000))
  veth_b=dt${tag:0:1}b$((id % 100000))
  subnet=$((id % 250 + 1))
  addr_a=$net.$subnet.1
  addr_b=$net.$subnet.2
  work=$(mktemp -d "${TMPDIR:-/tmp}/dtensor-netns-$tag-XXXXXX")
  trap _netns_pair_cleanup EXIT
  trap 'exit 130' INT TERM

  ip netns add "$ns_a" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
  ip netns add "$ns_b" || fail "second namespace"
  ip link add "$veth_a" type veth peer name "$veth_b" 2>"$work/err" ||
    skip "cannot create a veth pair: $(cat "$work/err")"
  ip link set "$veth_a" netns "$ns_a" || fail "move veth a"
  ip link set "$veth_b" netns "$ns_b" || fail "move veth b"
  ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a" || fail "address a"
  ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b" || fail "address b"
  local ns
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "lo up"; done
  ip -n "$ns_a" link set "$veth_a" up || fail "veth a up"
  ip -n "$ns_b" link set "$veth_b" up || fail "veth b up"
}

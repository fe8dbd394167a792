#!/usr/bin/env bash
# Two hosts for real: two network namespaces joined by a veth pair, a Redis
# store in the first, two ranks in each (DTENSOR_HOSTNAME = the namespace's
# address, so Gloo binds there). First a convolution across them must match
# the f64 oracle; then the link is cut during a run and every rank must raise
# within its timeout (+ a few seconds), both launchers exit non-zero.
#
# Usage: netns_test.sh DTENSOR_RUN FAULT_PROGRAM
# Exit 0: passed; 77: skipped (the reason is printed); anything else: failed.
# Everything it creates (namespaces, veth, redis, temp dirs) is removed on
# exit, success or not. It uses only 10.231.X.1-2/24 inside its own namespaces.
set -uo pipefail

run=${1:?usage: netns_test.sh DTENSOR_RUN FAULT_PROGRAM}
prog=${2:?usage: netns_test.sh DTENSOR_RUN FAULT_PROGRAM}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v redis-server >/dev/null || skip "redis-server is not installed (scripts/install-deps.sh)"

# Unique names per run, so that parallel runs never collide. Interface names
# are limited to 15 characters.
id=$$
ns_a=dtrel-a-$id
ns_b=dtrel-b-$id
veth_a=dtra$((id % 100000))
veth_b=dtrb$((id % 100000))
subnet=$((id % 250 + 1))
addr_a=10.231.$subnet.1
addr_b=10.231.$subnet.2
port=$((20000 + id % 20000))
work=$(mktemp -d "${TMPDIR:-/tmp}/dtensor-netns-XXXXXX")
redis_pid=

cleanup() {
  local rc=$?
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  # Any rank or launcher still running in our namespaces.
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  ip netns del "$ns_a" 2>/dev/null   # takes its end of the veth pair (and so both) with it
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  rm -rf "$work"
  # Leftovers would be a bug of this script: say so.
  if ip netns list 2>/dev/null | grep -q "dtrel-[ab]-$id"; then echo "cleanup: namespaces left"; rc=1; fi
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

ip netns exec "$ns_a" redis-server --bind "$addr_a" --port "$port" --save '' --appendonly no \
  --dir "$work" --protected-mode no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do
  ip netns exec "$ns_b" bash -c "exec 3<>/dev/tcp/$addr_a/$port" 2>/dev/null && break
  sleep 0.1
done
ip netns exec "$ns_b" bash -c "exec 3<>/dev/tcp/$addr_a/$port" 2>/dev/null ||
  fail "redis in $ns_a is not reachable from $ns_b over the veth: $(cat "$work/redis.log")"

# One launcher per "host": 2 ranks each, 4 in all. $1: node rank, $2: ns,
# $3: address, $4: key prefix of the job in the shared Redis, rest: program args.
launch() {
  local node=$1 ns=$2 addr=$3 job=$4
  shift 4
  ip netns exec "$ns" env DTENSOR_HOSTNAME="$addr" OMP_NUM_THREADS=1 TMPDIR="$work" \
    "$run" -n 2 --nnodes 2 --node-rank "$node" --store "redis://$addr_a:$port" --timeout 5 \
    --deadline 60 -- "$prog" "$@"
}

# Redis keys of a job must not meet those of the previous job: flush between.
flush() { ip netns exec "$ns_a" redis-cli -h "$addr_a" -p "$port" flushall >/dev/null 2>&1 || true; }

echo "== convolution across the two namespaces"
flush
launch 0 "$ns_a" "$addr_a" conv conv-check --width 400 >"$work/a.out" 2>&1 &
pa=$!
launch 1 "$ns_b" "$addr_b" conv conv-check --width 400 >"$work/b.out" 2>&1 &
pb=$!
wait $pa; rca=$?
wait $pb; rcb=$?
cat "$work/a.out" "$work/b.out"
[[ $rca -eq 0 && $rcb -eq 0 ]] || fail "conv-check exited $rca / $rcb"
[[ $(cat "$work/a.out" "$work/b.out" | grep -c 'conv-check max_err=.* ok') -eq 4 ]] ||
  fail "not every rank matched the oracle"

echo "== the link is cut during a run"
flush
launch 0 "$ns_a" "$addr_a" cut conv --seconds 40 --width 4000 >"$work/a.out" 2>&1 &
pa=$!
launch 1 "$ns_b" "$addr_b" cut conv --seconds 40 --width 4000 >"$work/b.out" 2>&1 &
pb=$!
sleep 3
ip -n "$ns_a" link set "$veth_a" down
cut=$(date +%s.%N)
wait $pa; rca=$?
wait $pb; rcb=$?
end=$(date +%s.%N)
cat "$work/a.out" "$work/b.out"
elapsed=$(awk "BEGIN { printf \"%.1f\", $end - $cut }")
echo "launchers exited $rca / $rcb, $elapsed s after the cut (timeout 5 s)"
[[ $rca -ne 0 && $rcb -ne 0 ]] || fail "a launcher exited 0 after the link was cut"
grep -q "dtensor-run: rank [0-9] failed" "$work/a.out" || fail "launcher A named no rank"
grep -q "dtensor-run: rank [0-9] failed" "$work/b.out" || fail "launcher B named no rank"
awk "BEGIN { exit !($elapsed < 5 + 10) }" || fail "took $elapsed s after the cut"
# Every rank that was not stopped by its launcher raised a typed error.
raised=$(cat "$work/a.out" "$work/b.out" | grep -c 'raised \(TimeoutError\|CommError\)')
((raised >= 2)) || fail "only $raised ranks raised a typed error"
echo "PASS"

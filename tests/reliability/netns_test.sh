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

# shellcheck source=../support/netns_pair.sh
source "$(dirname "$0")/../support/netns_pair.sh"
command -v redis-server >/dev/null || skip "redis-server is not installed (scripts/install-deps.sh)"
redis_pid=
netns_before_cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
}
netns_pair_setup rel 10.231
port=$((20000 + $$ % 20000))

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

#!/usr/bin/env bash
# The e2e scenario with librdkafka through kcat: `kcat -P` produces, `kcat -G` processes are
# the balanced-consumer group members (auto commit, the range/roundrobin assignors; -E keeps
# them through the broker restart instead of exiting when all brokers are down), and the
# Go helper e2e/clients/check does the checks and the admin steps kcat has no command for.
# kcat consumers cannot be held at a gate, so the 10,000 records are produced in four rounds
# of 2,500, one before each group event: the event then acts on a group that consumed and
# committed everything so far, and the commits are checked right after the broker restart.
set -uo pipefail

name=kcat
start=$SECONDS
: "${E2E_BROKERS:?}" "${E2E_TOPIC:?}" "${E2E_GROUP:?}" "${E2E_BIN:?}"
records=${E2E_RECORDS:-10000}
dir=${E2E_STATE:-$(mktemp -d)}/kcat
mkdir -p "$dir"
deadline=$((SECONDS + ${E2E_TIMEOUT_S:-100}))
declare -A pids

fail() {
	echo "FAIL $name: $* (after $((SECONDS - start))s)"
	for id in "${!pids[@]}"; do kill -KILL "${pids[$id]}" 2>/dev/null; done
	exit 1
}
check() {
	local out
	out=$("$E2E_BIN/check" "$@") || fail "$out"
	[ -z "$out" ] || echo "$out"
}

produce() { # produce FROM TO: records FROM..TO-1, acks=all
	seq "$1" $(($2 - 1)) | awk '{ printf "k-%05d:v-%05d\n", $1, $1 }' |
		kcat -P -b "$E2E_BROKERS" -t "$E2E_TOPIC" -K: -X acks=all -X linger.ms=5 \
			-X message.send.max.retries=50 -X retry.backoff.ms=100 2>>"$dir/produce.err" ||
		fail "kcat -P of records $1..$(($2 - 1)) exited $?: $(tail -1 "$dir/produce.err")"
}

member() { # member ID: start a balanced consumer writing "partition offset key value" lines
	kcat -C -u -E -b "$E2E_BROKERS" -G "$E2E_GROUP" -f '%p %o %k %s\n' \
		-X auto.offset.reset=earliest -X enable.auto.commit=true -X auto.commit.interval.ms=300 \
		-X session.timeout.ms=10000 -X heartbeat.interval.ms=500 -X client.id="kcat-$1" \
		"$E2E_TOPIC" >"$dir/kcat-$1.out" 2>"$dir/kcat-$1.err" &
	pids[$1]=$!
}

leave() { # leave ID: SIGTERM makes kcat close its consumer: final commit, LeaveGroup
	local pid=${pids[$1]}
	unset "pids[$1]"
	kill -TERM "$pid" 2>/dev/null
	local until=$((SECONDS + 15))
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < until)) || fail "kcat member $1 still running 15s after SIGTERM"
		sleep 0.05
	done
}

distinct() { cat "$dir"/kcat-*.out 2>/dev/null | awk '{ print $4 }' | sort -u | wc -l; }

wait_distinct() { # wait_distinct N: until N distinct records were consumed
	while (($(distinct) < $1)); do
		for id in "${!pids[@]}"; do
			kill -0 "${pids[$id]}" 2>/dev/null || fail "kcat member $id exited: $(tail -1 "$dir/kcat-$id.err")"
		done
		((SECONDS < deadline)) || fail "waiting for $1 distinct records: only $(distinct) consumed"
		sleep 0.1
	done
}

quarter=$((records / 4))
check create-topic
for id in 0 1 2; do member $id; done
check wait-group Stable 3
produce 0 $quarter
wait_distinct $quarter
check wait-committed

leave 0
check wait-group Stable 2
produce $quarter $((2 * quarter))
wait_distinct $((2 * quarter))
check wait-committed

member 3
check wait-group Stable 3
produce $((2 * quarter)) $((3 * quarter))
wait_distinct $((3 * quarter))
check wait-committed

if [ -n "${E2E_RESTART:-}" ]; then
	sh -c "$E2E_RESTART" >"$dir/restart.log" 2>&1 || fail "restart broker: $(tail -1 "$dir/restart.log")"
	check committed-now
	restarted="1 broker restart"
else
	restarted="no broker restart (E2E_RESTART unset)"
fi
produce $((3 * quarter)) "$records"
wait_distinct "$records"
check wait-committed
for id in "${!pids[@]}"; do leave "$id"; done
# librdkafka logs a response it cannot parse and carries on with what it parsed before it:
# the scenario can pass around a protocol error, so any is a failure of its own.
proto=$(cat "$dir"/*.err | grep -c PROTOERR)
((proto == 0)) || fail "librdkafka protocol errors ($proto), first: $(grep -h -m2 PROTOERR "$dir"/*.err | sed 's/^.*PROTOERR|//' | tr '\n' ' ')"
stats=$(check consumed "$dir"/kcat-*.out)
check wait-committed
admin=$(check admin)
echo "PASS $name: $records produced (kcat -P, in 4 rounds between the group events: kcat consumers cannot be held) to ${E2E_PARTITIONS:-6} partitions; consumed by a kcat -G group through 1 leave, 1 join, $restarted ($stats); committed = log end; $admin, by the Go helper (kcat has no admin commands) ($((SECONDS - start))s)"

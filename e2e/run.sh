#!/usr/bin/env bash
# The client matrix of issue 6: every Kafka client library a user runs, end to end against
# a fresh kaas process each (own port on 127.0.0.1, own data dir). Each scenario prints one
# PASS/FAIL/SKIP line; the suite ends with `N passed, N failed[, N skipped]` and exits
# non-zero if any failed.
#
#   e2e/run.sh [--broker=kaas|fake] [scenario ...]     (default: every scenario)
#
# --broker=fake runs the same matrix against franz-go's kfake, the reference the suite was
# developed against. E2E_KEEP=1 keeps the work dir (logs) even when everything passed.
set -uo pipefail
e2e=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$e2e")
cd "$root"
export PATH="/usr/local/go/bin:$PATH"

kind=kaas
only=()
for a in "$@"; do
	case $a in
	--broker=*) kind=${a#--broker=} ;;
	-h | --help) sed -n '2,12p' "$0"; exit 0 ;;
	*) only+=("$a") ;;
	esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kaas-e2e.XXXXXX")
export E2E_BIN=$work/bin E2E_BROKER_KIND=$kind
states=()
cleanup() {
	for s in "${states[@]}"; do "$e2e/broker.sh" stop "$s" 2>/dev/null; done
	if [ "${E2E_KEEP:-}" = 1 ] || ((failed > 0)); then
		echo "e2e: logs kept in $work" >&2
	else
		rm -rf "$work"
	fi
}
passed=0 failed=0 skipped=0
trap cleanup EXIT
trap 'exit 130' INT TERM

# Scenario budget: the suite must stay under 5 minutes on 2 cores.
scenario_timeout=${E2E_SCENARIO_TIMEOUT_S:-75}

echo "e2e: building kaas and the Go clients" >&2
start=$SECONDS
if ! go build -o "$E2E_BIN/" ./cmd/kaas ./e2e/fakebroker ./e2e/clients/... 2>"$work/build.log"; then
	cat "$work/build.log" >&2
	echo "FAIL build: go build failed"
	echo "0 passed, 1 failed"
	failed=1
	exit 1
fi
echo "e2e: built in $((SECONDS - start))s; broker: $kind" >&2

# free_port finds a port nobody listens on, below Linux's ephemeral range (32768+) so no
# outgoing connection holds it (scenarios run one after another).
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 12000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	return 1
}

# settled prints the answer to GET /readyz?settled of the broker whose HTTP port is $1
# (bash's /dev/tcp: the matrix needs no HTTP client installed).
settled() {
	local a
	exec {a}<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
	printf 'GET /readyz?settled HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&"$a"
	tr -d '\r' <&"$a"
	exec {a}>&-
}

verdict() {
	echo "$1"
	case $1 in
	PASS*) passed=$((passed + 1)) ;;
	FAIL*) failed=$((failed + 1)) ;;
	SKIP*) skipped=$((skipped + 1)) ;;
	esac
}

# run_scenario NAME NEED-CHECK COMMAND...: NEED-CHECK prints a skip reason when the client
# is not installed.
run_scenario() {
	local name=$1 need=$2
	shift 2
	if ((${#only[@]})) && [[ " ${only[*]} " != *" $name "* ]]; then
		return
	fi
	local reason
	if reason=$($need) && [ -n "$reason" ]; then
		verdict "SKIP $name: $reason"
		return
	fi
	local state=$work/$name port
	mkdir -p "$state"
	local brokers=() nodes=() restart
	if [ -n "${E2E_CLUSTER:-}" ] && [ "$kind" = kaas ]; then
		# A cluster of E2E_CLUSTER brokers on one data dir (static registry), each in a
		# state dir of its own; the client gets every address.
		local i ports=() https=() peers=""
		for ((i = 0; i < E2E_CLUSTER; i++)); do
			until port=$(free_port) && [[ " ${ports[*]} " != *" $port "* ]]; do :; done
			ports+=("$port")
			peers+="${peers:+,}$i@127.0.0.1:$port"
		done
		for ((i = 0; i < E2E_CLUSTER; i++)); do
			until port=$(free_port) && [[ " ${ports[*]} ${https[*]} " != *" $port "* ]]; do :; done
			https+=("$port")
		done
		for ((i = 0; i < E2E_CLUSTER; i++)); do
			nodes+=("$state/node-$i")
			states+=("$state/node-$i")
			mkdir -p "$state/node-$i"
			if ! E2E_DATA_DIR=$state/data E2E_KAAS_ARGS="${E2E_KAAS_ARGS:-} --node.id=$i --registry=static --registry.peers=$peers --http.listen=127.0.0.1:${https[i]}" \
				"$e2e/broker.sh" start "$state/node-$i" "${ports[i]}" 2>"$state/start.err"; then
				verdict "FAIL $name: broker $i of the cluster did not start: $(tail -1 "$state/start.err")"
				for n in "${nodes[@]}"; do "$e2e/broker.sh" stop "$n"; done
				return
			fi
			brokers+=("127.0.0.1:${ports[i]}")
		done
		# The client comes once ownership is at rest on every broker (/readyz?settled): a
		# broker joining moves partitions and coordinators, and a client that starts during
		# the moves meets them (sarama's transactional producer gives up on some).
		local deadline=$((SECONDS + 30)) h
		for h in "${https[@]}"; do
			until [[ $(settled "$h") == "HTTP/1.0 200"* ]]; do
				if ((SECONDS > deadline)); then
					verdict "FAIL $name: the cluster's ownership did not settle in 30s: $(settled "$h" | tail -1)"
					for n in "${nodes[@]}"; do "$e2e/broker.sh" stop "$n"; done
					return
				fi
				sleep 0.1
			done
		done
		restart="" # no restart hook: the cluster scenarios do not restart
	else
		nodes=("$state")
		states+=("$state")
		local tries=0
		until port=$(free_port) && "$e2e/broker.sh" start "$state" "$port" 2>"$state/start.err"; do
			if ((++tries == 3)); then
				verdict "FAIL $name: broker did not start: $(tail -1 "$state/start.err")"
				return
			fi
		done
		brokers=("127.0.0.1:$port")
		restart="$e2e/broker.sh restart $state"
	fi
	local t0=$SECONDS rc
	E2E_STATE=$state E2E_BROKERS=$(IFS=,; echo "${brokers[*]}") E2E_TOPIC=e2e-$name E2E_GROUP=e2e-$name-group \
		E2E_RESTART="$restart" E2E_TIMEOUT_S=$((scenario_timeout - 5)) \
		timeout -k 5 "$scenario_timeout" "$@" >"$state/out" 2>"$state/client.log" </dev/null
	rc=$?
	for n in "${nodes[@]}"; do "$e2e/broker.sh" stop "$n"; done
	local line
	line=$(grep -E '^(PASS|FAIL|SKIP) ' "$state/out" | tail -1)
	if [ -n "$line" ] && [ "${#nodes[@]}" -gt 1 ]; then
		# The client names itself; the verdict names the scenario (NAME-cluster).
		local rest=${line#* }
		line="${line%% *} $name ${rest#* }"
	fi
	if [ -z "$line" ]; then
		line="FAIL $name: exited $rc after $((SECONDS - t0))s without a verdict$( ((rc == 124)) && echo " (timed out)"); last log line: $(tail -1 "$state/client.log")"
	elif ((rc != 0)) && [[ $line == PASS* ]]; then
		line="FAIL $name: printed PASS but exited $rc"
	fi
	verdict "$line"
	if [[ $line == FAIL* ]]; then
		echo "--- $name: last client log lines ($state/client.log)" >&2
		tail -15 "$state/client.log" >&2
	fi
}

need_nothing() { :; }
need_kcat() { command -v kcat >/dev/null || echo "kcat is not installed (Debian package kcat; e2e/setup.sh installs it as root)"; }
need_python() {
	/usr/bin/python3 -c 'import confluent_kafka' 2>/dev/null ||
		echo "python3-confluent-kafka is not installed (Debian package; e2e/setup.sh installs it as root)"
}
need_node_module() {
	command -v node >/dev/null || { echo "node is not installed"; return; }
	[ -d "$e2e/js/node_modules/$1" ] || echo "npm package $1 is not installed (e2e/setup.sh runs npm ci in e2e/js)"
}
need_kafkajs() { need_node_module kafkajs; }
need_rdkafka() {
	# node-rdkafka 2.15.0 is built by e2e/setup.sh against Debian's librdkafka 2.0.2; a build
	# that failed or could not start left its reason in .rdkafka-skip.
	command -v node >/dev/null || { echo "node is not installed"; return; }
	if [ -f "$e2e/js/node_modules/.rdkafka-skip" ]; then
		cat "$e2e/js/node_modules/.rdkafka-skip"
		return
	fi
	local err
	err=$(cd "$e2e/js" && node -e "require('node-rdkafka')" 2>&1) ||
		echo "node-rdkafka does not load (e2e/setup.sh builds it against Debian's librdkafka-dev): $(grep -m1 -E 'Error' <<<"$err")"
}
need_rdkafka848() {
	# node-rdkafka 3.6.1 of e2e/js848, built by e2e/setup.sh with the librdkafka 2.12 it
	# bundles; a build that failed or could not start left its reason in .rdkafka-skip.
	command -v node >/dev/null || { echo "node is not installed"; return; }
	if [ -f "$e2e/js848/node_modules/.rdkafka-skip" ]; then
		cat "$e2e/js848/node_modules/.rdkafka-skip"
		return
	fi
	[ -d "$e2e/js848/node_modules/node-rdkafka" ] ||
		{ echo "npm package node-rdkafka 3.6.1 is not installed (e2e/setup.sh runs npm ci in e2e/js848)"; return; }
	local err
	err=$(cd "$e2e/js848" && node -e "require('node-rdkafka')" 2>&1) ||
		echo "node-rdkafka 3.6.1 does not load (e2e/setup.sh builds it with its bundled librdkafka): $(grep -m1 -E 'Error' <<<"$err")"
}

run_scenario kgo need_nothing "$E2E_BIN/kgo" -balancer=cooperative-sticky
run_scenario kgo-static-range need_nothing "$E2E_BIN/kgo" -balancer=range -static
run_scenario kgo-mixed need_nothing "$E2E_BIN/kgo" -balancer=cooperative-sticky -mixed
run_scenario kgo-848 need_nothing "$E2E_BIN/kgo" -balancer=cooperative-sticky -server-side
run_scenario sarama need_nothing "$E2E_BIN/sarama"
# SASL_PLAINTEXT (the PLAINTEXT-named listener mapped to it) with SCRAM-SHA-512 and the
# simple authorizer: the kgo scenario as User:alice, allowed by the ACLs of e2e/sasl-acls.json
# alone (its topics and groups by prefix, DESCRIBE on the cluster), users.json seeded by
# `kaas users set` as the chart does; the broker's log is then searched for the password.
need_kaas() { [ "$kind" = kaas ] || echo "SASL and ACLs are kaas's (the reference broker runs without them)"; }
sasl_pw=e2e-$RANDOM-$RANDOM-secret
E2E_SASL_MECHANISM=SCRAM-SHA-512 E2E_SASL_USER=alice E2E_SASL_PASSWORD=$sasl_pw \
	E2E_KAAS_USERS="alice:$sasl_pw" E2E_KAAS_ACLS=$e2e/sasl-acls.json \
	E2E_KAAS_ARGS="--listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT --sasl.enabled.mechanisms=SCRAM-SHA-512 --authorizer=simple" \
	run_scenario kgo-sasl-acl need_kaas "$E2E_BIN/kgo" -balancer=cooperative-sticky
if [ -f "$work/kgo-sasl-acl/broker.log" ] && grep -qF "$sasl_pw" "$work/kgo-sasl-acl/broker.log"; then
	verdict "FAIL kgo-sasl-acl-log: the broker's log holds the SASL password"
fi
run_scenario kafka-go need_nothing "$E2E_BIN/kafkago"
run_scenario kafkajs need_kafkajs node "$e2e/js/kafkajs.js"
run_scenario node-rdkafka need_rdkafka node "$e2e/js/rdkafka.js"
# The same on the consumer group protocol (KIP-848): librdkafka 2.12 (node-rdkafka 3.6.1 of
# e2e/js848); the Go helper waits on and administers the group with ConsumerGroupDescribe.
E2E_GROUP_PROTOCOL=consumer run_scenario node-rdkafka-848 need_rdkafka848 node "$e2e/js/rdkafka.js"
run_scenario kcat need_kcat "$e2e/kcat.sh"
run_scenario confluent-kafka-python need_python /usr/bin/python3 "$e2e/python/confluent.py"
# The same on the consumer group protocol: Debian's confluent-kafka 1.7.0 over the
# librdkafka 2.12 node-rdkafka 3.6.1 bundles (Debian's 2.0.2 predates KIP-848), loaded
# through LD_LIBRARY_PATH; the verdict names the librdkafka that ran.
rdkafka848_lib=$e2e/js848/node_modules/node-rdkafka/build/deps
need_python848() {
	local r
	r=$(need_python) && [ -n "$r" ] && { echo "$r"; return; }
	r=$(need_rdkafka848) && [ -n "$r" ] && { echo "$r"; return; }
	LD_LIBRARY_PATH=$rdkafka848_lib /usr/bin/python3 -c '
import sys
from confluent_kafka import libversion
sys.exit(0 if libversion()[1] >= 0x020400ff else 1)' 2>/dev/null ||
		echo "confluent-kafka does not load the librdkafka of node-rdkafka 3.6.1 from $rdkafka848_lib"
}
E2E_GROUP_PROTOCOL=consumer run_scenario confluent-kafka-python-848 need_python848 \
	env LD_LIBRARY_PATH="$rdkafka848_lib" /usr/bin/python3 "$e2e/python/confluent.py"
# Transactions (docs/transactions.md): committed and aborted transactions over 3 partitions
# read at read_committed and read_uncommitted, and consume-transform-produce with the
# group's offsets in the transaction (aborted once, then committed).
run_scenario sarama-txn need_nothing "$E2E_BIN/saramatxn"
run_scenario kafkajs-txn need_kafkajs node "$e2e/js/kafkajs-txn.js"
run_scenario confluent-kafka-python-txn need_python /usr/bin/python3 "$e2e/python/confluent_txn.py"
# The same on a cluster of three brokers (docs/transactions.md, In a cluster): transaction
# coordinators, group coordinators and partition leaders spread over the three, markers and
# verifications broker to broker.
need_cluster() { [ "$kind" = kaas ] || echo "a cluster is kaas's (the reference broker runs alone)"; }
need_cluster_kafkajs() { local r; r=$(need_cluster) && [ -n "$r" ] && { echo "$r"; return; }; need_kafkajs; }
need_cluster_python() { local r; r=$(need_cluster) && [ -n "$r" ] && { echo "$r"; return; }; need_python; }
E2E_CLUSTER=3 run_scenario sarama-txn-cluster need_cluster "$E2E_BIN/saramatxn"
E2E_CLUSTER=3 run_scenario kafkajs-txn-cluster need_cluster_kafkajs node "$e2e/js/kafkajs-txn.js"
E2E_CLUSTER=3 run_scenario confluent-kafka-python-txn-cluster need_cluster_python /usr/bin/python3 "$e2e/python/confluent_txn.py"
# Admin (issue 28): a compacted topic created with configs, its configs described (values and
# sources) and altered, the cluster and log dirs described, records deleted (the low watermark
# and a consumer from the start follow), the topic deleted.
run_scenario sarama-admin need_nothing "$E2E_BIN/saramaadmin"
run_scenario kafkajs-admin need_kafkajs node "$e2e/js/kafkajs-admin.js"
run_scenario confluent-kafka-python-admin need_python /usr/bin/python3 "$e2e/python/confluent_admin.py"

summary="$passed passed, $failed failed"
((skipped > 0)) && summary+=", $skipped skipped"
echo "e2e: matrix took $((SECONDS - start))s" >&2
echo "$summary"
((failed == 0))

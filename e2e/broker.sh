#!/usr/bin/env bash
# Starts, stops and restarts one broker for e2e/run.sh. A broker lives in a state directory
# that keeps its port, data dir, pid and log, so a restart comes back on the same port with
# the same data. The broker is kaas, or franz-go's kfake (e2e/fakebroker) with E2E_BROKER_KIND=fake.
#
#   broker.sh start STATE PORT    start, wait until it accepts connections
#   broker.sh stop STATE          SIGTERM, wait for the exit (SIGKILL after 20s)
#   broker.sh restart STATE       stop then start on the same port and data dir
#
# E2E_DATA_DIR names another data dir than STATE/data (the brokers of a cluster share one),
# kept in STATE for a restart.
set -uo pipefail

bin=${E2E_BIN:?E2E_BIN: directory of the built binaries}
kind=${E2E_BROKER_KIND:-kaas}

die() { echo "broker.sh: $*" >&2; exit 1; }

start() {
	local state=$1 port=$2 data
	data=${E2E_DATA_DIR:-$(cat "$state/datadir" 2>/dev/null || echo "$state/data")}
	mkdir -p "$data"
	echo "$port" >"$state/port"
	echo "$data" >"$state/datadir"
	# E2E_KAAS_USERS="name:password ..." and E2E_KAAS_ACLS (a file for acls.json) seed a
	# SASL scenario's data dir before its first start, as the chart's Secrets do.
	if [ "$kind" = kaas ] && [ ! -e "$data/__cluster/users.json" ]; then
		local u
		for u in ${E2E_KAAS_USERS:-}; do
			printf '%s\n' "${u#*:}" | "$bin/kaas" users set "${u%%:*}" --data.dir="$data" >/dev/null ||
				die "kaas users set ${u%%:*} failed"
		done
		if [ -n "${E2E_KAAS_ACLS:-}" ]; then
			mkdir -p "$data/__cluster" && cp "$E2E_KAAS_ACLS" "$data/__cluster/acls.json" ||
				die "copy $E2E_KAAS_ACLS"
		fi
	fi
	local args
	case $kind in
	kaas) args=("$bin/kaas" "--listeners=PLAINTEXT://127.0.0.1:$port" "--data.dir=$data" "--http.listen="
		"--group.initial.rebalance.delay.ms=0" "--log.format=json" ${E2E_KAAS_ARGS:-}) ;;
	fake) args=("$bin/fakebroker" "--port=$port" "--data.dir=$data") ;;
	*) die "unknown E2E_BROKER_KIND $kind" ;;
	esac
	echo "=== start $(date +%T.%N) ${args[*]}" >>"$state/broker.log"
	# Detached from our stdio, so a caller reading our output (the clients' restart hook)
	# is not held open by the broker.
	"${args[@]}" </dev/null >>"$state/broker.log" 2>&1 &
	echo $! >"$state/pid"
	local deadline=$((SECONDS + 20))
	while ((SECONDS < deadline)); do
		kill -0 "$(cat "$state/pid")" 2>/dev/null || die "broker exited at start (log: $state/broker.log)"
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	die "broker not listening on 127.0.0.1:$port after 20s (log: $state/broker.log)"
}

stop() {
	local state=$1 pid
	pid=$(cat "$state/pid" 2>/dev/null) || return 0
	kill -TERM "$pid" 2>/dev/null || { rm -f "$state/pid"; return 0; }
	local deadline=$((SECONDS + 20))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "broker.sh: broker $pid still running 20s after SIGTERM: SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null
			break
		fi
		sleep 0.05
	done
	echo "=== stopped $(date +%T.%N)" >>"$state/broker.log"
	rm -f "$state/pid"
}

case ${1:-} in
start) start "$2" "$3" ;;
stop) stop "$2" ;;
restart) stop "$2" && start "$2" "$(cat "$2/port")" ;;
*) die "usage: broker.sh start STATE PORT | stop STATE | restart STATE" ;;
esac

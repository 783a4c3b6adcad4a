#!/usr/bin/env bash
# Installs what the client matrix (e2e/run.sh) needs and is missing. Idempotent and quick when
# everything is there. Debian packages need root; without root, a missing client is reported
# as SKIP by run.sh with its reason. Nothing here reaches the network except Debian's package
# mirrors and the npm registry (the Go clients come from the module proxy via `go mod download`).
set -uo pipefail
cd "$(dirname "$0")"

log() { echo "e2e/setup: $*" >&2; }

# Debian packages: kcat and python3-confluent-kafka bring librdkafka1 with them; librdkafka-dev
# lets node-rdkafka build against the system librdkafka instead of the copy it bundles.
debs=(kcat librdkafka1 librdkafka-dev python3-confluent-kafka)
missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		# Another apt (a fresh machine's unattended upgrades, a second setup) may hold the
		# dpkg lock: wait for it rather than skip the clients.
		lock=(-o DPkg::Lock::Timeout=300)
		apt-get "${lock[@]}" update -qq >/dev/null 2>&1 || log "apt-get update failed"
		apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
			log "apt-get install ${missing[*]} failed: those clients will be skipped"
	else
		log "not root or no apt-get: ${missing[*]} stay missing (their clients will be skipped)"
	fi
fi

# npm packages from the committed lockfile. node-rdkafka is an optional dependency built from
# the registry's source against Debian's librdkafka (BUILD_LIBRDKAFKA=0: not the copy it
# bundles) with the headers of the node that runs it (npm_config_nodedir: node-gyp would
# otherwise download them from outside the npm registry). npm drops an optional dependency
# whose build fails and installs the rest, so kafkajs never depends on it; the reason is
# kept in node_modules/.rdkafka-skip for run.sh's SKIP line. `npm ci` wipes node_modules, so
# it runs only when the lockfile or node-rdkafka's prerequisites changed since the last
# install (recorded in node_modules/.e2e-lock).
# npm_ci DIR REASON BROKEN ERRPAT NOTE [VAR=value|-u VAR ...] runs `npm ci` in e2e/DIR
# when its lockfile or REASON changed since the last install (the stamp in
# DIR/node_modules/.e2e-lock), with the environment the trailing arguments give `env`.
# REASON is "build", or why node-rdkafka cannot be built there: then the optional
# dependency is left out and REASON is the skip reason. A build that does not load leaves
# "BROKEN (first error: the first line of the log ERRPAT matches ...)" as the skip reason.
npm_ci() {
	local dir=$1 reason=$2 broken=$3 errpat=$4 note=$5
	shift 5
	local stamp
	stamp="$(cat "$dir/package-lock.json")
rdkafka: $reason"
	[ "$stamp" = "$(cat "$dir/node_modules/.e2e-lock" 2>/dev/null)" ] && return 0
	local npmlog=${TMPDIR:-/tmp}/kaas-e2e-npm-ci-$dir.log omit=()
	[ "$reason" = build ] || omit=(--omit=optional)
	log "npm ci in e2e/$dir${omit:+ (without node-rdkafka: ${reason#*was not built: })}$note"
	if ! (cd "$dir" && env "$@" npm_config_nodedir="$nodedir" \
		npm ci --no-audit --no-fund --foreground-scripts "${omit[@]}" >"$npmlog" 2>&1); then
		log "npm ci in e2e/$dir failed (see $npmlog): its node clients will be skipped"
		return 0
	fi
	mkdir -p "$dir/node_modules" # npm ci with nothing but an omitted optional package makes none
	if [ "$reason" = build ]; then
		rm -f "$dir/node_modules/.rdkafka-skip"
		if ! (cd "$dir" && node -e "require('node-rdkafka')") >/dev/null 2>&1; then
			local first
			first=$(grep -m1 -E "$errpat" "$npmlog")
			echo "$broken (first error: ${first:-none logged}; see $npmlog)" >"$dir/node_modules/.rdkafka-skip"
			log "$(cat "$dir/node_modules/.rdkafka-skip")"
		fi
	else
		echo "$reason" >"$dir/node_modules/.rdkafka-skip"
	fi
	printf '%s' "$stamp" >"$dir/node_modules/.e2e-lock"
}

if command -v npm >/dev/null; then
	nodedir=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
	rdkafka=build
	if [ ! -f /usr/include/librdkafka/rdkafka.h ]; then
		rdkafka="node-rdkafka was not built: Debian's librdkafka-dev is not installed (e2e/setup.sh installs it as root)"
	elif [ ! -f "$nodedir/include/node/common.gypi" ]; then
		rdkafka="node-rdkafka was not built: no node headers in $nodedir/include/node (node-gyp would download them from outside the npm registry)"
	fi
	npm_ci js "$rdkafka" "node-rdkafka 2.15.0 did not build against Debian's librdkafka" 'error|ERR!' "" BUILD_LIBRDKAFKA=0

	# e2e/js848: node-rdkafka 3.6.1 built with the librdkafka 2.12 it bundles (no
	# BUILD_LIBRDKAFKA=0: Debian's 2.0.2 has no consumer group protocol, KIP-848), for the
	# node-rdkafka-848 scenario. Its configure and make run from the package's own sources
	# (about 2 minutes of CPU on a first install); the node headers come from npm_config_nodedir
	# as above. Same stamp and skip file as e2e/js, in js848/node_modules.
	rdkafka848=build
	if [ ! -f "$nodedir/include/node/common.gypi" ]; then
		rdkafka848="node-rdkafka 3.6.1 was not built: no node headers in $nodedir/include/node (node-gyp would download them from outside the npm registry)"
	elif ! command -v make >/dev/null || ! command -v cc >/dev/null || ! command -v c++ >/dev/null; then
		rdkafka848="node-rdkafka 3.6.1 was not built: its bundled librdkafka needs make, cc and c++"
	fi
	# Not a bare "error" for its first error: librdkafka's configure checks for strerror_r.
	npm_ci js848 "$rdkafka848" "node-rdkafka 3.6.1 did not build with its bundled librdkafka" 'error:|\*\*\*|ERR!' \
		"; building the bundled librdkafka takes a few minutes" -u BUILD_LIBRDKAFKA
else
	log "no npm: the node clients will be skipped"
fi
exit 0

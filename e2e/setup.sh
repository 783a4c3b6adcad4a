#!/usr/bin/env bash
# Installs what the client matrix (e2e/run.sh) needs and is missing. Idempotent and quick when
# everything is there. Debian packages need root; without root, a missing client is reported
# as SKIP by run.sh with its reason. Nothing here reaches the network except Debian's package
# mirrors and the npm registry (the Go clients come from the module proxy via `go mod download`).
set -uo pipefail
cd "$(dirname "$0")"

log() { echo "e2e/setup: $*" >&2; }

# Debian packages: kcat and python3-confluent-kafka bring librdkafka1 with them; librdkafka-dev
# lets node-rdkafka build against the system librdkafka instead of downloading its own.
debs=(kcat librdkafka1 librdkafka-dev python3-confluent-kafka)
missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null 2>&1 || log "apt-get update failed"
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
			log "apt-get install ${missing[*]} failed: those clients will be skipped"
	else
		log "not root or no apt-get: ${missing[*]} stay missing (their clients will be skipped)"
	fi
fi

# npm packages from the committed lockfile. `npm ci` wipes node_modules, so only run it when
# the lockfile changed since the last install (npm records it in node_modules/.package-lock.json).
if command -v npm >/dev/null; then
	if ! cmp -s js/package-lock.json js/node_modules/.e2e-lock 2>/dev/null; then
		log "npm ci in e2e/js"
		(cd js && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>"${TMPDIR:-/tmp}/kaas-e2e-npm-ci.log") &&
			cp js/package-lock.json js/node_modules/.e2e-lock ||
			log "npm ci failed (see ${TMPDIR:-/tmp}/kaas-e2e-npm-ci.log): the node clients will be skipped"
	fi
else
	log "no npm: the node clients will be skipped"
fi
exit 0

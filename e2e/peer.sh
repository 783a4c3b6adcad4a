#!/usr/bin/env bash
# Runs franz-go's own integration tests (pkg/kgo of the franz-go version in go.mod, built
# from the module cache) against a kaas broker alone, then against kfake (e2e/fakebroker),
# and prints each broker's result and time (see e2e/README.md).
#
#   e2e/peer.sh [TEST_REGEX]    default: ^(TestGroupETL|TestTxnEtl)$
#
# PEER_BROKERS (default "kaas fake") names the brokers, in turn; `make test` runs kaas
# alone. KGO_TEST_RECORDS (default 20000) is the tests' own record count.
set -uo pipefail
cd "$(dirname "$0")/.."
run=${1:-'^(TestGroupETL|TestTxnEtl)$'}
work=$(mktemp -d -t kaas-peer.XXXXXX)
bin=$work/bin
trap 'E2E_BIN=$bin E2E_BROKER_KIND=kaas e2e/broker.sh stop "$work/kaas" >/dev/null 2>&1
	E2E_BIN=$bin E2E_BROKER_KIND=fake e2e/broker.sh stop "$work/fake" >/dev/null 2>&1' EXIT

version=$(go list -m -f '{{.Version}}' github.com/twmb/franz-go) || exit 1
pkg=$(go env GOMODCACHE)/github.com/twmb/franz-go@$version/pkg/kgo
echo "peer: building kaas, kfake and franz-go $version's kgo tests"
mkdir -p "$bin" && go build -o "$bin" ./cmd/kaas ./e2e/fakebroker || exit 1
go test -c -o "$bin/kgo.test" github.com/twmb/franz-go/pkg/kgo || exit 1

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
failed=0
for kind in ${PEER_BROKERS:-kaas fake}; do
	p=$(port)
	E2E_BIN=$bin E2E_BROKER_KIND=$kind e2e/broker.sh start "$work/$kind" "$p" || exit 1
	start=$SECONDS
	# The tests read their data files relative to their package directory.
	if (cd "$pkg" && KGO_SEEDS=127.0.0.1:$p KGO_TEST_RF=1 KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-20000} KGO_LOG_LEVEL=none \
		"$bin/kgo.test" -test.run "$run" -test.timeout 10m >"$work/$kind.out" 2>&1); then
		echo "PASS $kind: $run ($((SECONDS - start))s)"
	else
		echo "FAIL $kind: $run ($((SECONDS - start))s); its failures:"
		grep -E -- '^\s*--- FAIL|^panic|timed out' "$work/$kind.out" | head -20
		failed=1
	fi
	E2E_BIN=$bin E2E_BROKER_KIND=$kind e2e/broker.sh stop "$work/$kind"
done
if ((failed)); then
	echo "peer: output and broker logs in $work"
else
	rm -rf "$work"
fi
exit $failed

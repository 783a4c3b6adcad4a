#!/usr/bin/env bash
# build.sh builds the Kubernetes control plane the real-apiserver tests run (e2e/kube) from
# the Go module proxy into a version-keyed cache outside the repo, only what is missing:
#   ${KAAS_TOOLS_CACHE:-$HOME/.cache/kaas-tools}/k8s-v1.37.2/
#     kube-apiserver kube-controller-manager kube-scheduler   (this module, k8s.io/kubernetes)
#     etcd                                                     (./etcd, etcd server v3.6)
#     kwok  kwok-stages/*.yaml                                 (sigs.k8s.io/kwok v0.8.0)
# Cold it takes ~15-20 min on 2 cores (the apiserver trio) and ~3.5 GB of Go build cache;
# with everything present it returns at once. It prints the cache directory on its last line.
# Concurrent runs wait on a lock file in the cache. No binary is ever committed.
set -euo pipefail

K8S_VERSION=v1.37.2
KWOK_VERSION=v0.8.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${KAAS_TOOLS_CACHE:-$HOME/.cache/kaas-tools}/k8s-${K8S_VERSION}"
export PATH="/usr/local/go/bin:$PATH"
GO="${GO:-go}"
mkdir -p "$out"

complete() {
	for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
		[ -x "$out/$b" ] || return 1
	done
	[ "$(cat "$out/kwok-stages/STAGES" 2>/dev/null)" = "fast ${KWOK_VERSION}" ] || return 1
}

if complete; then
	echo "$out"
	exit 0
fi

exec 9>"$out/.lock"
flock 9
if complete; then
	echo "$out"
	exit 0
fi

log() { echo "k8sbin: $*" >&2; }
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$out/etcd" ]; then
	log "building etcd (~1 min)"
	(cd "$here/etcd" && nice "$GO" build -trimpath -ldflags "-s -w" -o "$tmp/etcd" .)
	mv "$tmp/etcd" "$out/etcd"
fi

if [ ! -x "$out/kwok" ] || [ "$(cat "$out/kwok-stages/STAGES" 2>/dev/null)" != "fast ${KWOK_VERSION}" ]; then
	log "building kwok ${KWOK_VERSION} (~3 min)"
	mkdir -p "$tmp/bin"
	GOBIN="$tmp/bin" nice "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
	moddir="$("$GO" env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}"
	mkdir -p "$tmp/kwok-stages"
	# the "fast" stages: a pod goes Pending -> Running and Ready at once (the "general"
	# pod-ready waits for an Initialized condition that only the general pod-create sets)
	for s in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
		f="$moddir/kustomize/stage/$s.yaml"
		[ -f "$f" ] || { log "kwok stage $f not found"; exit 1; }
		cp "$f" "$tmp/kwok-stages/$(basename "$s").yaml"
	done
	echo "fast ${KWOK_VERSION}" >"$tmp/kwok-stages/STAGES"
	chmod -R u+w "$tmp/kwok-stages"
	rm -rf "$out/kwok-stages"
	mv "$tmp/kwok-stages" "$out/kwok-stages"
	mv "$tmp/bin/kwok" "$out/kwok"
fi

if [ ! -x "$out/kube-apiserver" ] || [ ! -x "$out/kube-controller-manager" ] || [ ! -x "$out/kube-scheduler" ]; then
	log "building kube-apiserver, kube-controller-manager, kube-scheduler ${K8S_VERSION} (~15-20 min cold on 2 cores)"
	v=k8s.io/component-base/version
	minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	(cd "$here" && nice "$GO" build -trimpath -o "$tmp/" \
		-ldflags "-s -w -X $v.gitVersion=${K8S_VERSION} -X $v.gitMajor=1 -X $v.gitMinor=${minor}" \
		./kube-apiserver ./kube-controller-manager ./kube-scheduler)
	for b in kube-apiserver kube-controller-manager kube-scheduler; do
		mv "$tmp/$b" "$out/$b"
	done
fi

complete || { log "incomplete cache in $out"; exit 1; }
log "binaries ready in $out"
echo "$out"

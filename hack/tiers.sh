#!/usr/bin/env bash
# tiers.sh runs the tiers of `make test` one after another, each as `make <tier>`, and at
# the end prints how long each took and the total: also when a tier fails, then the
# tiers after it do not run and the script exits with the failed tier's status.
#
#   hack/tiers.sh deps vet k8sbin gotest ...      (MAKE names the make to call)
#
# After k8sbin succeeds (and KAAS_SKIP_K8S is not 1) it exports KAAS_REQUIRE_K8S=1: the
# tiers after it fail, rather than skip, a test whose Kubernetes binaries are missing.
set -uo pipefail
make=${MAKE:-make}

now() { date +%s%N; }
names=() secs=() verdicts=()
t0=$(now)

report() {
	local total=$((($(now) - t0) / 1000000))
	echo
	echo "make test: time per tier"
	local i
	for i in "${!names[@]}"; do
		if [ "${verdicts[$i]}" = "not run" ]; then
			printf '  %-12s %8s    not run\n' "${names[$i]}" -
		else
			printf '  %-12s %8.1f s  %s\n' "${names[$i]}" "$(awk "BEGIN{print ${secs[$i]}/1000}")" "${verdicts[$i]}"
		fi
	done
	printf '  %-12s %8.1f s\n' total "$(awk "BEGIN{print $total/1000}")"
}
trap report EXIT
trap 'exit 130' INT TERM

rc=0
for tier in "$@"; do
	if ((rc != 0)); then
		names+=("$tier") secs+=(0) verdicts+=("not run")
		continue
	fi
	start=$(now)
	$make --no-print-directory "$tier"
	rc=$?
	names+=("$tier") secs+=($((($(now) - start) / 1000000)))
	if ((rc == 0)); then
		verdicts+=(ok)
	else
		verdicts+=("FAILED (exit $rc)")
	fi
	if [ "$tier" = k8sbin ] && ((rc == 0)) && [ "${KAAS_SKIP_K8S:-}" != 1 ]; then
		export KAAS_REQUIRE_K8S=1
	fi
done
exit "$rc"

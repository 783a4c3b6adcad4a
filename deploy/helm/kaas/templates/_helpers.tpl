{{/* Names. */}}
{{- define "kaas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The StatefulSet's name, hence the pods' (<fullname>-<ordinal>); short enough that
"<fullname>-headless" and the leases "<fullname>-headless-broker-<id>" stay valid names. */}}
{{- define "kaas.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service: the StatefulSet's serviceName and the registry's --registry.service. */}}
{{- define "kaas.headless" -}}
{{- printf "%s-headless" (include "kaas.fullname" .) -}}
{{- end -}}

{{- define "kaas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kaas.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kaas.claimName" -}}
{{- default (printf "%s-data" (include "kaas.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}

{{/* selectorLabels pick the broker pods; they never change across upgrades. */}}
{{- define "kaas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kaas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker
{{- end -}}

{{- define "kaas.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kaas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kaas.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* bootstrap is what clients in the cluster dial: the client Service. */}}
{{- define "kaas.bootstrap" -}}
{{- printf "%s.%s.svc:%d" (include "kaas.fullname" .) .Release.Namespace (int .Values.ports.kafka) -}}
{{- end -}}

{{/* configData is the settings ConfigMap's data (KAAS_<KEY> variables). */}}
{{- define "kaas.configData" -}}
{{- $reserved := list "node.id" "listeners" "advertised.listeners" "listener.security.protocol.map" "data.dir" "http.listen" "registry" "registry.peers" "registry.service" "registry.namespace" "cluster.size" "lease.duration.ms" "lease.renew.interval.ms" "shutdown.timeout.ms" "ssl.certificate.location" "ssl.key.location" "ssl.truststore.location" "ssl.client.auth" "sasl.enabled.mechanisms" "authorizer" "super.users" "inter.broker.listener.name" "sasl.mechanism.inter.broker.protocol" "inter.broker.sasl.username" "inter.broker.sasl.password.file" -}}
{{- range $k, $v := .Values.config }}
{{- if has $k $reserved }}
{{- fail (printf "config.%s: the chart sets this setting itself (see values.yaml)" $k) }}
{{- end }}
{{- if not (regexMatch "^[a-z][a-z0-9.]*[a-z0-9]$" $k) }}
{{- fail (printf "config.%s: a setting key is lower case words joined by dots (kaas --help lists them)" $k) }}
{{- end }}
{{ printf "KAAS_%s" (upper (replace "." "_" $k)) }}: {{ toString $v | quote }}
{{- end }}
{{- end -}}

{{/* assignmentData is the assignment ConfigMap's data (when assignment is set). */}}
{{- define "kaas.assignmentData" -}}
assignment.json: {{ toJson .Values.assignment | quote }}
{{- end -}}

{{/* configChecksum rolls the pods when a setting or the assignment changes. */}}
{{- define "kaas.configChecksum" -}}
{{- printf "%s\n---\n%s" (include "kaas.configData" .) (ternary (include "kaas.assignmentData" .) "" (not (empty .Values.assignment))) | sha256sum -}}
{{- end -}}

{{/* checks fails the render on settings that cannot work. */}}
{{- define "kaas.checks" -}}
{{- $replicas := int .Values.replicas -}}
{{- if lt $replicas 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- $need := add (div (add (int .Values.shutdownTimeoutMs) 999) 1000) 1 2 -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $need) -}}
{{- fail (printf "terminationGracePeriodSeconds %d does not cover a graceful stop: shutdownTimeoutMs %d needs at least %d (the stop, the broker's forced-exit second, 2s of margin)" (int .Values.terminationGracePeriodSeconds) (int .Values.shutdownTimeoutMs) (int $need)) -}}
{{- end -}}
{{- if gt (mul 2 (int .Values.lease.renewIntervalMs)) (int .Values.lease.durationMs) -}}
{{- fail "lease.renewIntervalMs must be at most half of lease.durationMs, so one failed renewal does not lose the lease" -}}
{{- end -}}
{{- $sec := .Values.security -}}
{{- if and (has $sec.protocol (list "SSL" "SASL_SSL")) (not $sec.tls.secretName) -}}
{{- fail (printf "security.protocol %s needs security.tls.secretName (a TLS Secret with tls.crt and tls.key)" $sec.protocol) -}}
{{- end -}}
{{- if and $sec.tls.secretName (not (has $sec.protocol (list "SSL" "SASL_SSL"))) -}}
{{- fail (printf "security.tls.secretName is set but security.protocol %s serves no TLS: use SSL or SASL_SSL" $sec.protocol) -}}
{{- end -}}
{{- if and $sec.sasl.users (not $sec.sasl.usersSecret) -}}
{{- fail "security.sasl.users needs security.sasl.usersSecret (a Secret with each user's password under the user's name)" -}}
{{- end -}}
{{- if and $sec.sasl.users (not (hasPrefix "SASL" $sec.protocol)) -}}
{{- fail (printf "security.sasl.users is set but security.protocol %s does not authenticate: use SASL_PLAINTEXT or SASL_SSL" $sec.protocol) -}}
{{- end -}}
{{- with $sec.sasl.interBroker.user -}}
{{- if not (hasPrefix "SASL" $sec.protocol) -}}
{{- fail (printf "security.sasl.interBroker.user is set but security.protocol %s does not authenticate: use SASL_PLAINTEXT or SASL_SSL" $sec.protocol) -}}
{{- end -}}
{{- if not (has . $sec.sasl.users) -}}
{{- fail (printf "security.sasl.interBroker.user %s must be one of security.sasl.users (its credentials are written, and its password read, from security.sasl.usersSecret)" .) -}}
{{- end -}}
{{- if not (has $sec.sasl.interBroker.mechanism (splitList "," $sec.sasl.mechanisms)) -}}
{{- fail (printf "security.sasl.interBroker.mechanism %s is not one of security.sasl.mechanisms %s" $sec.sasl.interBroker.mechanism $sec.sasl.mechanisms) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.persistence.existingClaim -}}
{{- if not (has "ReadWriteMany" .Values.persistence.accessModes) -}}
{{- fail (printf "persistence.accessModes %v: every broker mounts the one data claim, so it must be ReadWriteMany" .Values.persistence.accessModes) -}}
{{- end -}}
{{- else -}}
{{- $claim := lookup "v1" "PersistentVolumeClaim" .Release.Namespace .Values.persistence.existingClaim -}}
{{- if $claim -}}
{{- if not (has "ReadWriteMany" $claim.spec.accessModes) -}}
{{- fail (printf "persistence.existingClaim %s has access modes %v: every broker mounts it, so it must be ReadWriteMany" .Values.persistence.existingClaim $claim.spec.accessModes) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with .Values.podDisruptionBudget -}}
{{- if .enabled -}}
{{- if and (not (kindIs "invalid" .minAvailable)) (not (kindIs "invalid" .maxUnavailable)) -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" -}}
{{- end -}}
{{- if not (kindIs "invalid" .maxUnavailable) -}}
{{- $v := toString .maxUnavailable -}}
{{- $n := 0 -}}
{{- if hasSuffix "%" $v -}}
{{- $n = int (floor (divf (mulf $replicas (float64 (trimSuffix "%" $v))) 100)) -}}
{{- else -}}
{{- $n = int $v -}}
{{- end -}}
{{- if lt $n 1 -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %s of %d replicas allows no eviction: node drains would hang" $v $replicas) -}}
{{- end -}}
{{- else if not (kindIs "invalid" .minAvailable) -}}
{{- $v := toString .minAvailable -}}
{{- $n := 0 -}}
{{- if hasSuffix "%" $v -}}
{{- $n = int (ceil (divf (mulf $replicas (float64 (trimSuffix "%" $v))) 100)) -}}
{{- else -}}
{{- $n = int $v -}}
{{- end -}}
{{- if ge $n $replicas -}}
{{- fail (printf "podDisruptionBudget.minAvailable %s of %d replicas allows no eviction: node drains would hang" $v $replicas) -}}
{{- end -}}
{{- else -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Names
*/}}
{{- define "svit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Resource name prefix, at most 40 characters so that suffixes such as
"-ray-workers" and StatefulSet pod ordinals stay within the 63-character limits.
The release name alone when it contains the chart name or is a prefix of it
(release "svit" gives "svit-gateway", "svit-etcd-0", ...); otherwise
<release>-<chart>.
*/}}
{{- define "svit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if or (contains $name .Release.Name) (hasPrefix .Release.Name $name) -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "svit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels. Call with (dict "ctx" $ "component" "gateway").
*/}}
{{- define "svit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svit.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "svit.labels" -}}
helm.sh/chart: {{ include "svit.chart" .ctx }}
{{ include "svit.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: svit-cluster
{{- end -}}

{{/*
Selector for every pod of this release's svit components that may talk to
etcd and Redis (the gateway and the Ray worker hosts). NetworkPolicy selectors
use only the instance and component labels: KubeRay may rewrite
app.kubernetes.io/name on the pods it creates.
*/}}
{{- define "svit.dataClientSelector" -}}
matchLabels:
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values:
      - gateway
      - ray-worker
{{- end -}}

{{/*
Selector for every pod of this release that talks to Redis: the etcd clients
plus the outbox dispatcher.
*/}}
{{- define "svit.redisClientSelector" -}}
matchLabels:
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values:
      - gateway
      - ray-worker
      - dispatcher
{{- end -}}

{{/*
Selector for every Ray node of this release (head, worker hosts and, when it
joins Ray, the gateway).
*/}}
{{- define "svit.rayPeerSelector" -}}
matchLabels:
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values:
      - ray-head
      - ray-worker
      {{- if .Values.gateway.joinRay }}
      - gateway
      {{- end }}
{{- end -}}

{{/*
Images
*/}}
{{- define "svit.image" -}}
{{- include "svit.imageRef" (dict "image" .Values.image "tag" .Chart.AppVersion) -}}
{{- end -}}

{{/*
An image reference: repository@digest when image.digest is set (the tag is then
ignored: a digest pins the exact image), else repository:tag (tag defaulting to
the given "tag"). Call with (dict "image" IMAGE_VALUES "tag" DEFAULT_TAG).
*/}}
{{- define "svit.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .tag .image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The ServiceAccount every pod of the release runs as.
*/}}
{{- define "svit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "svit.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Pod template metadata: the chart's labels plus podLabels (global, then the
component's; the chart's own labels always win, so selectors keep matching),
and annotations: the chart's (checksums) plus podAnnotations (component's win
over global). Call with (dict "ctx" $ "component" NAME "values" COMPONENT_VALUES
"annotations" CHART_ANNOTATIONS).
*/}}
{{- define "svit.podMetadata" -}}
{{- $own := fromYaml (include "svit.labels" (dict "ctx" .ctx "component" .component)) -}}
{{- $labels := merge $own (deepCopy (.values.podLabels | default dict)) (deepCopy (.ctx.Values.podLabels | default dict)) -}}
{{- $ann := merge (deepCopy (.annotations | default dict)) (deepCopy (.values.podAnnotations | default dict)) (deepCopy (.ctx.Values.podAnnotations | default dict)) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Pod spec fields shared by every pod: ServiceAccount (token mount off unless
serviceAccount.automountServiceAccountToken), priorityClassName and
topologySpreadConstraints (the component's, else the global ones). A spread
constraint without a labelSelector gets the component's selector labels.
Call with (dict "ctx" $ "component" NAME "values" COMPONENT_VALUES), plus
"keepServiceAccount" true to leave serviceAccountName to someone else (KubeRay
gives the head its own, with RBAC, when its autoscaler is on).
*/}}
{{- define "svit.podSpecCommon" -}}
{{- if not .keepServiceAccount }}
serviceAccountName: {{ include "svit.serviceAccountName" .ctx }}
{{- end }}
automountServiceAccountToken: {{ .ctx.Values.serviceAccount.automountServiceAccountToken }}
{{- with (.values.priorityClassName | default .ctx.Values.priorityClassName) }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- $tsc := .values.topologySpreadConstraints | default .ctx.Values.topologySpreadConstraints }}
{{- if $tsc }}
topologySpreadConstraints:
{{- range $tsc }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (fromYaml (include "svit.selectorLabels" (dict "ctx" $.ctx "component" $.component)))) }}
{{- end }}
  - {{- toYaml $c | nindent 4 }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Addresses
*/}}
{{- define "svit.etcdHeadless" -}}
{{- printf "%s-etcd-headless" (include "svit.fullname" .) -}}
{{- end -}}

{{- define "svit.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $full := include "svit.fullname" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "%s-etcd-%d.%s.%s.svc.%s:%d" $full $i (include "svit.etcdHeadless" $) $.Release.Namespace $.Values.clusterDomain (int $.Values.etcd.clientPort)) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- end -}}
{{- end -}}

{{- define "svit.redisHost" -}}
{{- printf "%s-redis.%s.svc.%s" (include "svit.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "svit.rayHeadService" -}}
{{- if eq .Values.ray.mode "kuberay" -}}
{{- printf "%s-ray-head-svc" (include "svit.fullname" .) -}}
{{- else -}}
{{- printf "%s-ray-head" (include "svit.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "svit.rayAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "svit.rayHeadService" .) .Release.Namespace .Values.clusterDomain (int .Values.ray.gcsPort) -}}
{{- end -}}

{{- define "svit.gatewayService" -}}
{{- printf "%s-gateway" (include "svit.fullname" .) -}}
{{- end -}}

{{/*
Secrets
*/}}
{{- define "svit.tokensSecretName" -}}
{{- if .Values.auth.generateSecret -}}
{{- printf "%s-tokens" (include "svit.fullname" .) -}}
{{- else -}}
{{- required "auth.existingSecret is required when auth.generateSecret is false" .Values.auth.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "svit.tokensKey" -}}
{{- if .Values.auth.generateSecret -}}tokens.json{{- else -}}{{ .Values.auth.tokensKey }}{{- end -}}
{{- end -}}

{{- define "svit.adminTokenKey" -}}
{{- if .Values.auth.generateSecret -}}admin-token{{- else -}}{{ .Values.auth.adminTokenKey }}{{- end -}}
{{- end -}}

{{/* Secret holding SVIT_REDIS_URL under key redis-url (or the external one). */}}
{{- define "svit.redisUrlSecretName" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.external.existingSecret -}}
{{- .Values.redis.external.existingSecret -}}
{{- else -}}
{{- printf "%s-redis" (include "svit.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "svit.redisUrlSecretKey" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.external.existingSecret -}}
{{- .Values.redis.external.existingSecretKey -}}
{{- else -}}redis-url{{- end -}}
{{- end -}}

{{- define "svit.rayAuthSecretName" -}}
{{- default (printf "%s-ray-auth" (include "svit.fullname" .)) .Values.ray.auth.existingSecret -}}
{{- end -}}

{{- define "svit.rayAuthSecretKey" -}}
{{- if .Values.ray.auth.existingSecret -}}{{ .Values.ray.auth.existingSecretKey }}{{- else -}}auth_token{{- end -}}
{{- end -}}

{{/*
Reuse a value already stored in a Secret of this release, so that generated
credentials survive upgrades. Call with (dict "ctx" $ "name" NAME "key" KEY "length" N).
Outside a cluster (helm template, lint) lookup returns nothing and a fresh value is made.
*/}}
{{- define "svit.persistentRandom" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum (int .length) -}}
{{- end -}}
{{- end -}}

{{/*
Container environment shared by every svit container (gateway, Ray nodes, test).
*/}}
{{- define "svit.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: SVIT_HOST_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: SVIT_NODE_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HOME
  value: /tmp
- name: SVIT_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "svit.redisUrlSecretName" . }}
      key: {{ include "svit.redisUrlSecretKey" . }}
{{- if eq .Values.ray.auth.mode "token" }}
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "svit.rayAuthSecretName" . }}
      key: {{ include "svit.rayAuthSecretKey" . }}
{{- end }}
{{- with .Values.runtime.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "svit.envFrom" -}}
- configMapRef:
    name: {{ include "svit.fullname" . }}-config
{{- end -}}

{{/* Writable scratch space for Ray and Python with a read-only root filesystem. */}}
{{- define "svit.scratchVolumes" -}}
- name: tmp
  emptyDir: {}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.ray.shmSizeLimit }}
{{- end -}}

{{- define "svit.scratchMounts" -}}
- name: tmp
  mountPath: /tmp
- name: dshm
  mountPath: /dev/shm
{{- end -}}

{{/*
Pod securityContext for the etcd and Redis pods: the given settings, with
runAsNonRoot and the RuntimeDefault seccomp profile always on.
*/}}
{{- define "svit.forcedPodSecurityContext" -}}
{{- $forced := dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (merge $forced (deepCopy .)) -}}
{{- end -}}

{{- define "svit.containerSecurityContext" -}}
{{ toYaml .Values.containerSecurityContext }}
{{- end -}}

{{/*
Cross-field checks the JSON schema cannot express.
*/}}
{{- define "svit.validate" -}}
{{- if and .Values.gateway.autoscaling.enabled (gt (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) -}}
{{- fail "gateway.autoscaling.minReplicas must not exceed gateway.autoscaling.maxReplicas" -}}
{{- end -}}
{{- if and (eq .Values.ray.mode "kuberay") (gt (int .Values.ray.kuberay.minReplicas) (int .Values.ray.kuberay.maxReplicas)) -}}
{{- fail "ray.kuberay.minReplicas must not exceed ray.kuberay.maxReplicas" -}}
{{- end -}}
{{- if eq .Values.ray.mode "kuberay" -}}
{{- $r := int .Values.ray.workers.replicas -}}
{{- if or (lt $r (int .Values.ray.kuberay.minReplicas)) (gt $r (int .Values.ray.kuberay.maxReplicas)) -}}
{{- fail "ray.workers.replicas must lie between ray.kuberay.minReplicas and ray.kuberay.maxReplicas" -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) .Values.redis.external.url .Values.redis.external.existingSecret -}}
{{- fail "set only one of redis.external.url and redis.external.existingSecret" -}}
{{- end -}}
{{- include "svit.validateMounts" . -}}
{{- end -}}

{{/*
Probes of a host-agent container. `svit-cluster host-agent` rewrites a heartbeat
file (SVIT_AGENT_HEARTBEAT_FILE) after each answer from its agent, every 5 s;
`svit-cluster healthcheck --heartbeat` only reads that file (no Ray driver).
Liveness: the heartbeat is fresh (the launcher and its agent are alive).
Readiness: fresh and the host lease is held (the host can take processes).
*/}}
{{- define "svit.heartbeatFile" -}}/tmp/svit-agent-heartbeat.json{{- end -}}

{{- define "svit.hostAgentProbes" -}}
startupProbe:
  exec:
    command: ["svit-cluster", "healthcheck", "--heartbeat", {{ include "svit.heartbeatFile" . | quote }}, "--max-age", "30"]
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 60
livenessProbe:
  exec:
    command: ["svit-cluster", "healthcheck", "--heartbeat", {{ include "svit.heartbeatFile" . | quote }}, "--max-age", "60"]
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  exec:
    command: ["svit-cluster", "healthcheck", "--heartbeat", {{ include "svit.heartbeatFile" . | quote }}, "--max-age", "20", "--require-lease"]
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/*
The ports block as the JSON svit_cluster.ports.PortsConfig reads (SVIT_PORTS_JSON).
*/}}
{{- define "svit.portsJson" -}}
{{- $p := .Values.ports | default dict -}}
{{- $h := $p.http | default dict -}}
{{- $l := $p.llm | default dict -}}
{{- $s := $p.spawn | default dict -}}
{{- $doc := dict
  "http" (dict "enabled" ($h.enabled | default false) "allow_hosts" ($h.allowHosts | default list) "max_response_bytes" (int64 ($h.maxResponseBytes | default 65536)) "timeout_s" (float64 ($h.timeoutS | default 10)))
  "llm" (dict "enabled" ($l.enabled | default false) "max_messages" (int64 ($l.maxMessages | default 32)))
  "spawn" (dict "enabled" ($s.enabled | default false))
  "max_calls" (int64 (ternary $p.maxCalls 8 (hasKey $p "maxCalls")))
  "max_input_bytes" (int64 ($p.maxInputBytes | default 65536))
  "max_output_bytes" (int64 ($p.maxOutputBytes | default 262144))
  "fuel_per_call" (int64 (ternary $p.fuelPerCall 1000 (hasKey $p "fuelPerCall"))) -}}
{{- toJson $doc -}}
{{- end -}}

{{/*
Checksum of the generated tokens Secret, as a pod annotation of the pods that
read a token from an environment variable (the dispatcher's SVIT_TOKEN): a
changed token rolls them. The generated values persist across upgrades
(svit.persistentRandom), so an unchanged Secret gives the same checksum. With
auth.existingSecret the chart cannot see the content: "external" (roll the
dispatcher yourself after rotating; the gateway re-reads its mounted file).
*/}}
{{- define "svit.tokensChecksum" -}}
{{- if .Values.auth.generateSecret -}}
{{- include (print .Template.BasePath "/secret-tokens.yaml") . | sha256sum -}}
{{- else -}}
external
{{- end -}}
{{- end -}}


{{/*
Mounts (values.yaml mounts:). Grant keys are camelCase in the values and
MountsConfig's field names in SVIT_MOUNTS_JSON; only the keys a grant sets are
rendered, so MountsConfig's defaults apply to the others. An inline "dsn" is
never rendered (svit.validateMounts refuses it: it would land in the ConfigMap).
*/}}
{{- define "svit.mountGrantKeys" -}}
{{- toJson (dict "name" "name" "kind" "kind" "processes" "processes" "source" "source" "label" "label" "dsnEnv" "dsn_env" "query" "query" "params" "params" "statementTimeoutMs" "statement_timeout_ms" "cacheTtlS" "cache_ttl_s" "value" "value") -}}
{{- end -}}

{{/* The grants as the JSON list svit_cluster.mounts.MountsConfig reads (SVIT_MOUNTS_JSON). */}}
{{- define "svit.mountsJson" -}}
{{- $keys := include "svit.mountGrantKeys" . | fromJson -}}
{{- $out := list -}}
{{- range $grant := ((.Values.mounts | default dict).grants | default list) -}}
{{- $g := dict -}}
{{- range $from, $to := $keys -}}
{{- if hasKey $grant $from -}}
{{- $_ := set $g $to (index $grant $from) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $g "statement_timeout_ms" -}}
{{- $_ := set $g "statement_timeout_ms" (int64 $g.statement_timeout_ms) -}}
{{- end -}}
{{- $out = append $out $g -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Volumes, mounts and environment of the pods that run process actors: the Ray
worker hosts (pods and kuberay modes). The head runs no svit actor (no CPUs, no
svit_host resource) and the gateway only calls actors, so neither gets them.
*/}}
{{- define "svit.mountVolumes" -}}
{{- range (.Values.mounts | default dict).volumes | default list }}
- {{ toYaml (omit . "mountPath" "readOnly" "subPath") | indent 2 | trim }}
{{- end }}
{{- end -}}

{{- define "svit.mountVolumeMounts" -}}
{{- range (.Values.mounts | default dict).volumes | default list }}
- name: {{ .name }}
  mountPath: {{ .mountPath | quote }}
  {{- if .readOnly }}
  readOnly: true
  {{- end }}
  {{- with .subPath }}
  subPath: {{ . | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "svit.mountEnv" -}}
{{- with (.Values.mounts | default dict).env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Cross-field checks of mounts that the JSON schema cannot express: every folder
grant's source lies on a shared volume mounted into every worker host; a
sql_query grant reads its connection string from an environment variable the
worker hosts have; nothing secret reaches the ConfigMap.
*/}}
{{- define "svit.validateMounts" -}}
{{- $m := .Values.mounts | default dict -}}
{{- $volumes := $m.volumes | default list -}}
{{- $envNames := list -}}
{{- range $e := ($m.env | default list) -}}
{{- if hasPrefix "SVIT_" $e.name -}}
{{- fail (printf "mounts.env %s: names starting with SVIT_ are svit's own settings; choose another name for the connection string" $e.name) -}}
{{- end -}}
{{- $envNames = append $envNames $e.name -}}
{{- end -}}
{{- range $e := (.Values.runtime.extraEnv | default list) -}}
{{- $envNames = append $envNames $e.name -}}
{{- end -}}
{{- $volNames := list -}}
{{- range $i, $v := $volumes -}}
{{- if has $v.name (list "tmp" "dshm") -}}
{{- fail (printf "mounts.volumes[%d]: the name %q is taken by the chart's scratch volumes (tmp, dshm); choose another" $i $v.name) -}}
{{- end -}}
{{- if has $v.name $volNames -}}
{{- fail (printf "mounts.volumes[%d]: the volume name %q is used twice" $i $v.name) -}}
{{- end -}}
{{- $volNames = append $volNames $v.name -}}
{{- $sources := keys (omit $v "name" "mountPath" "readOnly" "subPath") | sortAlpha -}}
{{- if ne (len $sources) 1 -}}
{{- fail (printf "mounts.volumes[%d] (%s) needs exactly one volume source, e.g. persistentVolumeClaim: {claimName: ...}; it has %d (%s)" $i $v.name (len $sources) (join ", " $sources)) -}}
{{- end -}}
{{- end -}}
{{- $names := list -}}
{{- range $i, $g := ($m.grants | default list) -}}
{{- $where := printf "mounts.grants[%d] (%s)" $i $g.name -}}
{{- if not $g.processes -}}
{{- fail (printf "%s needs processes: at least one fnmatch pattern on the process id (\"svit://acme/*\"); nothing is granted to every process by default" $where) -}}
{{- end -}}
{{- if has $g.name $names -}}
{{- fail (printf "%s: the mount name %s is granted twice; mount names must be unique" $where $g.name) -}}
{{- end -}}
{{- $names = append $names $g.name -}}
{{- if hasKey $g "dsn" -}}
{{- fail (printf "%s: an inline dsn would be rendered into the ConfigMap; put the connection string in a Secret, expose it with mounts.env (valueFrom.secretKeyRef) and name that variable in dsnEnv" $where) -}}
{{- end -}}
{{- if eq $g.kind "sql_query" -}}
{{- if not $g.dsnEnv -}}
{{- fail (printf "%s: a sql_query grant needs dsnEnv, the environment variable holding the connection string (set it with mounts.env from a Secret)" $where) -}}
{{- end -}}
{{- if not (has $g.dsnEnv $envNames) -}}
{{- fail (printf "%s: dsnEnv %s is not set on the worker hosts; add it to mounts.env (valueFrom.secretKeyRef) or runtime.extraEnv" $where $g.dsnEnv) -}}
{{- end -}}
{{- end -}}
{{- if has $g.kind (list "folder" "writable_folder") -}}
{{- $src := $g.source | default "" -}}
{{- if or (not (hasPrefix "/" $src)) (regexMatch "(^|/)\\.\\.?(/|$)|//" $src) -}}
{{- fail (printf "%s: source %q must be a clean absolute directory path (no . or .. segments, no //)" $where $src) -}}
{{- end -}}
{{- $best := dict -}}
{{- range $v := $volumes -}}
{{- $mp := trimSuffix "/" $v.mountPath -}}
{{- if or (eq $src $mp) (hasPrefix (printf "%s/" $mp) $src) -}}
{{- if or (not $best.mountPath) (gt (len $mp) (len (trimSuffix "/" $best.mountPath))) -}}
{{- $best = $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $best.mountPath -}}
{{- $paths := list -}}
{{- range $v := $volumes -}}{{- $paths = append $paths $v.mountPath -}}{{- end -}}
{{- fail (printf "%s: source %s is not under any mounts.volumes[].mountPath (%s); mount a shared volume (ReadWriteMany for a writable_folder) there, so every worker host sees the same directory" $where $src (default "none" (join ", " $paths))) -}}
{{- end -}}
{{- if hasKey $best "emptyDir" -}}
{{- fail (printf "%s: source %s is on the emptyDir volume %s, a different directory in every pod; use a shared volume (ReadWriteMany for a writable_folder)" $where $src $best.name) -}}
{{- end -}}
{{- if and (eq $g.kind "writable_folder") $best.readOnly -}}
{{- fail (printf "%s: source %s is on the read-only volume %s; a writable_folder needs it mounted read-write" $where $src $best.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "infer-stream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infer-stream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "infer-stream.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "infer-stream.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "infer-stream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "infer-stream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels; call with (dict "root" $ "component" "live") */}}
{{- define "infer-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infer-stream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "infer-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "infer-stream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image: the -gpu build with gpu.enabled (image.gpuTag, else the tag with -gpu appended) */}}
{{- define "infer-stream.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.gpu.enabled -}}
{{- if .Values.image.gpuTag -}}
{{- $tag = .Values.image.gpuTag -}}
{{- else if not (hasSuffix "-gpu" $tag) -}}
{{- $tag = printf "%s-gpu" $tag -}}
{{- end -}}
{{- else if hasSuffix "-gpu" $tag -}}
{{- fail (printf "image.tag %s is the GPU image but gpu.enabled is false: its pods would get no GPU. Set gpu.enabled=true (the -gpu image is then chosen for you), or give the CPU image's tag" $tag) -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The pod-level settings both workloads share: call with (dict "root" $ "drain" N "margin" M) */}}
{{- define "infer-stream.podSettings" -}}
{{- $v := .root.Values -}}
serviceAccountName: {{ include "infer-stream.serviceAccountName" .root }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ add .drain .margin }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and $v.gpu.enabled $v.gpu.runtimeClassName }}
runtimeClassName: {{ $v.gpu.runtimeClassName }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "infer-stream.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* Ports and probes: on the metrics listener for `run`, on the API listener for `serve` (call with (dict "root" $ "serve" BOOL)) */}}
{{- define "infer-stream.probes" -}}
{{- $v := .root.Values -}}
ports:
  {{- if .serve }}
  - name: api
    containerPort: {{ $v.serve.port }}
    protocol: TCP
  {{- end }}
  - name: metrics
    containerPort: {{ $v.metrics.port }}
    protocol: TCP
{{- $port := "metrics" }}
{{- $scheme := "HTTP" }}
{{- if .serve }}
{{- $port = "api" }}
{{- if $v.serve.tls.secretName }}{{ $scheme = "HTTPS" }}{{ end }}
{{- end }}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ $port }}
    scheme: {{ $scheme }}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $port }}
    scheme: {{ $scheme }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  {{- if .serve }}
  # /readyz on the API needs a token: the first viewer token of the mounted
  # tokens file (else its first), sent by curl in the container. The token
  # goes through a pipe, never into the pod spec or a command line.
  exec:
    command:
      - sh
      - -c
      - {{ include "infer-stream.readyzCommand" .root | quote }}
  timeoutSeconds: 3
  {{- else }}
  httpGet:
    path: /readyz
    port: metrics
    scheme: HTTP
  timeoutSeconds: 3
  {{- end }}
  periodSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* serve's readiness check: curl asks /readyz on the API listener with a token from the tokens file */}}
{{- define "infer-stream.readyzCommand" -}}
{{- $tls := .Values.serve.tls.secretName -}}
awk '!/^[[:space:]]*#/ && NF >= 2 { if ($1 == "viewer") { t = $2; exit } if (a == "") a = $2 } END { if (t == "") t = a; printf "header = \"Authorization: Bearer %s\"\n", t }' /etc/infer-stream/api/tokens.txt | curl -fsS -m 2 -o /dev/null -K - {{ if $tls }}-k https{{ else }}http{{ end }}://127.0.0.1:{{ .Values.serve.port }}/readyz
{{- end -}}

{{/* resources with the GPU limit added: call with (dict "root" $ "resources" R) */}}
{{- define "infer-stream.resources" -}}
{{- $r := deepCopy (default dict .resources) -}}
{{- if .root.Values.gpu.enabled -}}
{{- $limits := deepCopy (default dict $r.limits) -}}
{{- $_ := set $limits .root.Values.gpu.resourceName (.root.Values.gpu.count | int) -}}
{{- $_ := set $r "limits" $limits -}}
{{- end -}}
{{- with $r }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "infer-stream.envFrom" -}}
{{- if or .Values.secrets.env .Values.secrets.existingSecret }}
envFrom:
  {{- if .Values.secrets.env }}
  - secretRef:
      name: {{ include "infer-stream.fullname" . }}-env
  {{- end }}
  {{- if .Values.secrets.existingSecret }}
  - secretRef:
      name: {{ .Values.secrets.existingSecret }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "infer-stream.tlsMount" -}}
{{- if .Values.secrets.tlsSecret }}
- name: tls
  mountPath: /etc/infer-stream/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "infer-stream.tlsVolume" -}}
{{- if .Values.secrets.tlsSecret }}
- name: tls
  secret:
    secretName: {{ .Values.secrets.tlsSecret }}
{{- end }}
{{- end -}}

{{/* serve: the tokens file and the API's TLS files, from their Secrets */}}
{{- define "infer-stream.apiMounts" -}}
- name: api-tokens
  mountPath: /etc/infer-stream/api
  readOnly: true
{{- if .Values.serve.tls.secretName }}
- name: api-tls
  mountPath: /etc/infer-stream/api-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "infer-stream.apiVolumes" -}}
- name: api-tokens
  secret:
    secretName: {{ .Values.serve.tokens.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.serve.tokens.key }}
        path: tokens.txt
{{- if .Values.serve.tls.secretName }}
- name: api-tls
  secret:
    secretName: {{ .Values.serve.tls.secretName }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end -}}

{{/* The [pipeline.api] table the chart appends to the live TOML in serve mode. */}}
{{- define "infer-stream.apiToml" -}}
{{- $s := .Values.serve }}

# Written by the chart (serve.*): the API listener, its tokens and TLS files.
[pipeline.api]
listen = "0.0.0.0:{{ $s.port }}"
tokens_file = "/etc/infer-stream/api/tokens.txt"
{{- if $s.tls.secretName }}
tls = { cert = "/etc/infer-stream/api-tls/tls.crt", key = "/etc/infer-stream/api-tls/tls.key" }
{{- end }}
{{- if $s.maxBodyBytes }}
max_body_bytes = {{ int $s.maxBodyBytes }}
{{- end }}
{{- if $s.resultsBuffer }}
results_buffer = {{ int $s.resultsBuffer }}
{{- end }}
{{- end -}}

{{/* Refuses serve values that cannot work, with the fix. */}}
{{- define "infer-stream.checkServe" -}}
{{- $v := .Values -}}
{{- if and $v.live.enabled $v.serve.enabled -}}
{{- if not $v.serve.tokens.existingSecret -}}
{{- fail "serve.enabled needs serve.tokens.existingSecret: a Secret with the tokens file (one `ROLE TOKEN` a line, key serve.tokens.key). serve listens on 0.0.0.0 and refuses to start without tokens" -}}
{{- end -}}
{{- if not $v.pipeline.existingConfigMap -}}
{{- range $i, $t := prepend $v.pipeline.shards $v.pipeline.toml -}}
{{- if regexMatch `(?m)^[ \t]*(api[ \t]*[.=]|\[[ \t]*pipeline[ \t]*\.[ \t]*api[ \t]*\])` $t -}}
{{- fail (printf "serve.enabled: %s sets [pipeline] api, which the chart writes from serve.* (listen, tokens_file, tls, maxBodyBytes, resultsBuffer): remove it from the TOML" (ternary "pipeline.toml" (printf "pipeline.shards[%d]" (sub $i 1)) (eq $i 0))) -}}
{{- end -}}
{{- end -}}
{{- if and (or $v.metrics.serviceMonitor.enabled $v.live.autoscaling.enabled) (not (regexMatch `(?m)^[ \t]*metrics_addr[ \t]*=` $v.pipeline.toml)) -}}
{{- fail (printf "serve.enabled with metrics.serviceMonitor or live.autoscaling: Prometheus scrapes the metrics port, which serve opens only when the TOML asks: add metrics_addr = \"0.0.0.0:%d\" to [pipeline] in pipeline.toml (serve's own /metrics needs a token)" (int $v.metrics.port)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}


{{/* A PersistentVolumeClaim's spec from live.persistence */}}
{{- define "infer-stream.claimSpec" -}}
{{- $p := .Values.live.persistence -}}
accessModes:
  {{- toYaml $p.accessModes | nindent 2 }}
{{- with $p.storageClassName }}
storageClassName: {{ . }}
{{- end }}
resources:
  requests:
    storage: {{ $p.size }}
{{- end -}}

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

{{- define "infer-stream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
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

{{- define "infer-stream.probes" -}}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
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

{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gpu-labeller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name; a release called gpu-labeller keeps the plain name that rbac/ uses. */}}
{{- define "gpu-labeller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Cluster-scoped objects (ClusterRole, binding, admission policy) of the label writer. */}}
{{- define "gpu-labeller.writerName" -}}
{{- printf "%s-nfd-lite" (include "gpu-labeller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-labeller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-labeller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-labeller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-labeller.labels" -}}
helm.sh/chart: {{ include "gpu-labeller.chart" . }}
{{ include "gpu-labeller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the writer's identity objects; the component matches rbac/. */}}
{{- define "gpu-labeller.writerLabels" -}}
{{ include "gpu-labeller.labels" . }}
app.kubernetes.io/component: nfd-lite
{{- end }}

{{/* The label writer's ServiceAccount: the chart's own, or one the admin manages. */}}
{{- define "gpu-labeller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default "nfd-lite" .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository[:tag][@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "gpu-labeller.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The device-plugin config file gfd reads for sharing (time-slicing / MPS) and flags. */}}
{{- define "gpu-labeller.sharingConfigMap" -}}
{{- if .Values.sharing.existingConfigMap }}
{{- .Values.sharing.existingConfigMap }}
{{- else if .Values.sharing.config }}
{{- printf "%s-sharing" (include "gpu-labeller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
gfd must run as root only where the host demands it: writing into a root-owned hostPath directory, or
the CAP_SYS_ADMIN features (vGPU detection, MIG monitoring), since Kubernetes grants added capabilities
to root processes only.
*/}}
{{- define "gpu-labeller.gfdRunsAsRoot" -}}
{{- if or (eq .Values.featureDir.type "hostPath") .Values.gfd.vgpu.enabled .Values.gfd.migMonitoring.enabled }}true{{ end }}
{{- end }}

{{- define "gpu-labeller.gfdNeedsSysAdmin" -}}
{{- if or .Values.gfd.vgpu.enabled .Values.gfd.migMonitoring.enabled }}true{{ end }}
{{- end }}

{{- define "gpu-labeller.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-labeller.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-labeller.testLabels" -}}
helm.sh/chart: {{ include "gpu-labeller.chart" . }}
{{ include "gpu-labeller.testSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: test
{{- end }}

{{/* Namespace of the namespaced objects: the release namespace unless namespaceOverride is set. */}}
{{- define "gpu-labeller.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
A CEL string literal holding the given string: single-quoted, with backslashes, quotes and line breaks
escaped, so no value (even one past the schema, --skip-schema-validation) can end the literal and be
read as an expression. Put the expression into YAML with toJson, which quotes it once more.
*/}}
{{- define "gpu-labeller.celString" -}}
'{{ . | replace "\\" "\\\\" | replace "'" "\\'" | replace "\n" "\\n" | replace "\r" "\\r" }}'
{{- end }}

{{/* An alert's labels: its severity, then metrics.prometheusRule.alertLabels. Called with (list $ SEVERITY). */}}
{{- define "gpu-labeller.alertLabels" -}}
{{- $root := index . 0 -}}
severity: {{ index . 1 }}
{{- with $root.Values.metrics.prometheusRule.alertLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

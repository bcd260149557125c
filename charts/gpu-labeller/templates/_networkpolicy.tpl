{{/*
How nfd-lite's egress names the API server (networkPolicy.apiServerEgress): kubernetes, cilium or calico.
Nothing is looked up in the cluster, so `helm template` renders what `helm install` creates. A release
upgraded with --reuse-values from a chart without the value has none: it is then the default.
*/}}
{{- define "gpu-labeller.apiServerEgress" -}}
{{- $mode := .Values.networkPolicy.apiServerEgress | default "kubernetes" -}}
{{- if not (has $mode (list "kubernetes" "cilium" "calico")) -}}
{{- fail (printf "networkPolicy.apiServerEgress: %q is none of kubernetes, cilium, calico" $mode) -}}
{{- end -}}
{{- if and (ne $mode "kubernetes") .Values.networkPolicy.apiServerCIDRs -}}
{{- fail (printf "networkPolicy.apiServerCIDRs is used only with networkPolicy.apiServerEgress=kubernetes; with %s the policy names the API server itself: remove the CIDRs" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The name of the CNI-native policy that lets nfd-lite reach the API server (cilium, calico modes). */}}
{{- define "gpu-labeller.apiServerPolicyName" -}}
{{- printf "%s-api-server" (include "gpu-labeller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end -}}

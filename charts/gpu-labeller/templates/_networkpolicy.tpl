{{/*
The API server's endpoints as JSON {"cidrs": [...], "ports": [...]}: what the cluster says now (the
EndpointSlices of the `kubernetes` Service, or its Endpoints on clusters without them) plus
networkPolicy.apiServerCIDRs / apiServerPorts. Egress policies see the endpoint address, not the service
IP. `lookup` finds nothing where there is no cluster (helm template, helm lint), so the values list is
then all there is.
*/}}
{{- define "gpu-labeller.apiServerEndpoints" -}}
{{- $cidrs := list -}}
{{- $ports := list -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" -}}
{{- range ($slices.items | default list) -}}
{{- if eq (get (.metadata.labels | default dict) "kubernetes.io/service-name") "kubernetes" -}}
{{- $bits := ternary "128" "32" (eq .addressType "IPv6") -}}
{{- range (.endpoints | default list) -}}
{{- range (.addresses | default list) -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . $bits) -}}
{{- end -}}
{{- end -}}
{{- range (.ports | default list) -}}
{{- $ports = append $ports (int .port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $cidrs -}}
{{- $endpoints := lookup "v1" "Endpoints" "default" "kubernetes" -}}
{{- range ($endpoints.subsets | default list) -}}
{{- range (.addresses | default list) -}}
{{- $cidrs = append $cidrs (printf "%s/%s" .ip (ternary "128" "32" (contains ":" .ip))) -}}
{{- end -}}
{{- range (.ports | default list) -}}
{{- $ports = append $ports (int .port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $cidrs = concat $cidrs .Values.networkPolicy.apiServerCIDRs | uniq -}}
{{- range .Values.networkPolicy.apiServerPorts -}}
{{- $ports = append $ports (int .) -}}
{{- end -}}
{{- dict "cidrs" $cidrs "ports" (uniq $ports) | toJson -}}
{{- end -}}

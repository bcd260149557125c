{{/*
The `helm test` pod's name, which its NetworkPolicy shares: `helm test --logs` fetches the log of a pod
named after each test hook (helm 3.19 and 4.1 do not skip hooks of other kinds).
*/}}
{{- define "gpu-labeller.testPod" -}}
{{- printf "%s-test-gpu-present" (include "gpu-labeller.fullname" .) }}
{{- end }}

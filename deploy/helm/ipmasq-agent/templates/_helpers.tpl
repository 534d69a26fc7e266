{{/* The labels every object carries, as deploy/kubernetes's do. */}}
{{- define "ipmasq-agent.labels" -}}
app.kubernetes.io/name: ipmasq-agent
{{- end }}

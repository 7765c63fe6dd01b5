{{- /* The name of the release's objects: the release name when it already says kraken
(`helm install kraken` gives kraken, not kraken-kraken), else <release>-kraken. */ -}}
{{- define "kraken.name" -}}
{{- if contains "kraken" .Release.Name -}}
{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ printf "%s-kraken" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- end -}}
{{- define "kraken.labels" -}}
app.kubernetes.io/name: kraken
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "kraken.selector" -}}
app.kubernetes.io/name: kraken
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- /* The operator's user name: its ServiceAccount's. */ -}}
{{- define "kraken.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "kraken.name" . }}
{{- end -}}
{{- /* The RBAC manager's pods: a name of their own, so the operator's selector never
matches them. */ -}}
{{- define "kraken.rbacManagerSelector" -}}
app.kubernetes.io/name: kraken-rbac-manager
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- /* Whether the pods placement is offered: asked for by value, or the default placement. */ -}}
{{- define "kraken.runnerPods" -}}
{{- if or .Values.runner.pods.enabled (eq .Values.runner.placement "pods") -}}true{{- end -}}
{{- end -}}

{{- define "kraken.name" -}}{{ .Release.Name }}-kraken{{- end -}}
{{- define "kraken.labels" -}}
app.kubernetes.io/name: kraken
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "kraken.selector" -}}
app.kubernetes.io/name: kraken
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

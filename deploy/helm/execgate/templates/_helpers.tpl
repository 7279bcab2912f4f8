{{- define "execgate.name" -}}{{ .Chart.Name }}{{- end -}}
{{- define "execgate.fullname" -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "execgate.labels" -}}
app.kubernetes.io/name: {{ include "execgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "execgate.selector" -}}
app.kubernetes.io/name: {{ include "execgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

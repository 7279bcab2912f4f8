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

{{- /* The gateway pods: the Service's and the PDB's target. With the split
they carry a component label, so executors never receive traffic; without
it the selector is unchanged (a Deployment's selector is immutable). */ -}}
{{- define "execgate.gatewaySelector" -}}
{{ include "execgate.selector" . }}
{{- if .Values.split.enabled }}
app.kubernetes.io/component: gateway
{{- end }}
{{- end -}}
{{- define "execgate.executorSelector" -}}
{{ include "execgate.selector" . }}
app.kubernetes.io/component: executor
{{- end -}}
{{- /* The Redis URL as env var NAME (quota or dispatch). */ -}}
{{- define "execgate.redisEnv" -}}
{{- $name := .name -}}
{{- with .root -}}
{{- if .Values.redis.existingUrlSecret }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef: { name: {{ .Values.redis.existingUrlSecret }}, key: url }
{{- else if .Values.redis.url }}
- name: {{ $name }}
  value: {{ .Values.redis.url | quote }}
{{- end }}
{{- end }}
{{- end -}}

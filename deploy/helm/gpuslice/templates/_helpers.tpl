{{/* Names, labels and images shared by every template. */}}

{{- define "gpuslice.fullname" -}}
{{- if contains "gpuslice" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gpuslice" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuslice.labels" -}}
app.kubernetes.io/name: gpuslice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "ctx" $ "component" "scheduler") */}}
{{- define "gpuslice.selector" -}}
app.kubernetes.io/name: gpuslice
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuslice.image" -}}
{{- $tag := .image.tag | default .ctx.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* kube-scheduler follows the cluster's version unless a tag is given. */}}
{{- define "gpuslice.kubeSchedulerImage" -}}
{{- $img := .Values.images.kubeScheduler -}}
{{- $tag := $img.tag | default (printf "v%s.%s.%s" .Capabilities.KubeVersion.Major (.Capabilities.KubeVersion.Minor | trimSuffix "+") (regexReplaceAll "^v?[0-9]+\\.[0-9]+\\.([0-9]+).*$" .Capabilities.KubeVersion.Version "${1}")) -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}

{{- define "gpuslice.schedulerService" -}}{{ include "gpuslice.fullname" . }}-scheduler{{- end -}}
{{- define "gpuslice.webhookService" -}}{{ include "gpuslice.fullname" . }}-webhook{{- end -}}
{{- define "gpuslice.webhookSecret" -}}{{ include "gpuslice.fullname" . }}-webhook-tls{{- end -}}
{{- define "gpuslice.webhookConfig" -}}{{ include "gpuslice.fullname" . }}{{- end -}}

{{- define "gpuslice.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "gpuslice.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

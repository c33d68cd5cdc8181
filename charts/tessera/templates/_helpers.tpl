{{/*
Labels of every object's metadata: the two the manifests carry (selectors use only those),
plus Helm's standard ones (tests/deploy/test_chart.py ignores exactly these four when it
compares the chart with the Kustomize overlays). Call with (list $ "component").
*/}}
{{- define "tessera.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: tessera
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version }}
{{- end -}}

{{- define "tessera.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "tessera.validate" -}}
{{- if not (has .Values.tls.provider (list "self-signed" "cert-manager")) -}}
{{- fail (printf "tls.provider must be self-signed or cert-manager, not %q" .Values.tls.provider) -}}
{{- end -}}
{{- end -}}

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
{{- if not (has .Values.agentProfile (list "elastic" "nano-gpu" "aliyun" "hami" "volcano-vgpu")) -}}
{{- fail (printf "agentProfile must be elastic, nano-gpu, aliyun, hami or volcano-vgpu, not %q" .Values.agentProfile) -}}
{{- end -}}
{{- if and .Values.hamiAgent (or (ne .Values.agentProfile "hami") (ne .Values.hamiAgent "hami-v2.8")) -}}
{{- fail (printf "hamiAgent must be \"\" or hami-v2.8 (with agentProfile hami), not %q with agentProfile %q" .Values.hamiAgent .Values.agentProfile) -}}
{{- end -}}
{{- if (.Values.allocator | default dict).hamiAgent -}}
{{- fail "allocator.hamiAgent is now hamiAgent: the webhook reads it too (docs/hami.md)" -}}
{{- end -}}
{{- end -}}

{{/* The --agent-profile argument of both services (none for the default, elastic), and
--hami-agent when an older HAMi release is named. */}}
{{- define "tessera.agentProfileArgs" -}}
{{- if ne .Values.agentProfile "elastic" }}
- --agent-profile={{ .Values.agentProfile }}
{{- end -}}
{{- if .Values.hamiAgent }}
- --hami-agent={{ .Values.hamiAgent }}
{{- end -}}
{{- end -}}

{{/* The resources the extender manages for the agent profile: every resource the shaped
     pods carry, and for hami its task priority nvidia.com/priority as HAMi's chart lists it
     (tessera/agent_profiles/node_agent.py NodeAgent.managed_resources; tests/deploy checks). */}}
{{- define "tessera.managedResources" -}}
{{- $names := dict
      "elastic" (list "elasticgpu.io/gpu-core" "elasticgpu.io/gpu-memory")
      "nano-gpu" (list "nano-gpu/gpu-percent")
      "aliyun" (list "aliyun.com/gpu-mem")
      "hami" (list "nvidia.com/gpu" "nvidia.com/gpumem" "nvidia.com/gpumem-percentage" "nvidia.com/gpucores" "nvidia.com/priority")
      "volcano-vgpu" (list "volcano.sh/vgpu-number" "volcano.sh/vgpu-memory" "volcano.sh/vgpu-memory-percentage" "volcano.sh/vgpu-cores") -}}
{{- range get $names .Values.agentProfile }}
- name: {{ . }}
  ignoredByScheduler: true
{{- end -}}
{{- end -}}

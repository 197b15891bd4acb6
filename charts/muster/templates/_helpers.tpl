{{/*
metadata.labels of one object (indented for metadata at the top level): its own labels (a dict, maybe empty) over .Values.commonLabels,
and no labels key at all when both are empty, as the kustomization's objects have none.
Call: include "muster.labels" (list $ (dict "app.kubernetes.io/name" "muster"))
*/}}
{{- define "muster.labels" -}}
{{- $labels := merge (dict) (index . 1) (index . 0).Values.commonLabels -}}
{{- with $labels }}
  labels:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{/* The selector labels of one component (extender or scheduler); they never change. */}}
{{- define "muster.selector" -}}
app.kubernetes.io/name: muster
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "muster.image" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end }}

{{/*
A duration setting in milliseconds, failing with the value's path when it is not a Go
duration ("5s", "500ms", "1m30s"). Muster also takes a bare number as seconds; kube-scheduler's
configuration does not. Call: include "muster.durationMs" (list "extender.bindTimeout" VALUE BARE_OK)
*/}}
{{- define "muster.durationMs" -}}
{{- $path := index . 0 -}}
{{- $d := toString (index . 1) -}}
{{- $unit := "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|ms|s|m|h)" -}}
{{- if and (index . 2) (regexMatch "^[0-9]+(\\.[0-9]+)?$" $d) -}}
{{- mulf (float64 $d) 1000.0 -}}
{{- else if regexMatch (printf "^(%s)+$" $unit) $d -}}
{{- $scale := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll $unit $d -1 -}}
{{- $n := regexFind "^[0-9.]+" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $scale (trimPrefix $n .))) -}}
{{- end -}}
{{- $total -}}
{{- else -}}
{{- fail (printf "values: %s is %q, not a duration (Go style: 5s, 500ms, 1m30s%s)" $path $d (ternary "; a bare number is seconds" "" (index . 2))) -}}
{{- end -}}
{{- end }}

{{/*
How new gang pods get the scheduling gate muster.dev/gang: "webhook", "policy" or "off".
gating: auto takes the MutatingAdmissionPolicy where the cluster serves it
(admissionregistration.k8s.io/v1, Kubernetes 1.36 and later), else the webhook. helm install
and upgrade ask the cluster; helm template knows no cluster and takes the webhook unless given
--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy. The older switches
webhook.enabled and gatePolicy.enabled, when either is set, decide as before (the webhook unless
set off; both on fails). Call: include "muster.gating" $
*/}}
{{- define "muster.gating" -}}
{{- $web := .Values.webhook | default dict -}}
{{- $pol := .Values.gatePolicy | default dict -}}
{{- $gating := .Values.gating | default "auto" | toString -}}
{{- if or (hasKey $web "enabled") (hasKey $pol "enabled") -}}
{{- if ne $gating "auto" -}}
{{- fail (printf "gating is %q and webhook.enabled or gatePolicy.enabled is set: choose with gating alone (auto, webhook, policy or off)" $gating) -}}
{{- end -}}
{{- $w := ternary $web.enabled true (hasKey $web "enabled") -}}
{{- $p := ternary $pol.enabled false (hasKey $pol "enabled") -}}
{{- if and $w $p -}}
{{- fail "gatePolicy.enabled and webhook.enabled: the scheduling gate comes from one of the two; set webhook.enabled=false (or gating: policy alone)" -}}
{{- end -}}
{{- $gating = ternary "policy" (ternary "webhook" "off" $w) $p -}}
{{- else if eq $gating "auto" -}}
{{- $gating = ternary "policy" "webhook" (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") -}}
{{- end -}}
{{- $gating -}}
{{- end }}

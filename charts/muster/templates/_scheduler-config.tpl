{{- /* manifests/scheduler-config.yaml: one profile, "muster", with Muster as its extender.
The text is a define so that kube-scheduler's pods can carry its checksum (scheduler-deployment.yaml). */ -}}
{{- define "muster.schedulerConfig" -}}
{{- $x := .Values.extender }}
{{- $s := .Values.scheduler }}
{{- $bindMs := include "muster.durationMs" (list "extender.bindTimeout" $x.bindTimeout true) }}
{{- $httpMs := include "muster.durationMs" (list "scheduler.httpTimeout" $s.httpTimeout false) }}
{{- if and $s.bindVerb (le (float64 $httpMs) (float64 $bindMs)) }}
{{- fail (printf "values: scheduler.httpTimeout (%s) must exceed extender.bindTimeout (%s): a bind held at the gang barrier for the whole bind timeout must still answer before kube-scheduler gives up" (toString $s.httpTimeout) (toString $x.bindTimeout)) }}
{{- end -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: muster-scheduler
# Every feasible node reaches the extender (a gang's planned node must be a candidate).
percentageOfNodesToScore: {{ int $s.percentageOfNodesToScore }}
profiles:
  - schedulerName: muster
extenders:
  # Muster's own pod, through its Service, with the client certificate that lets this
  # scheduler, and nothing else, call the verbs (docs/install.md, "Certificates").
  - urlPrefix: "https://muster.{{ .Release.Namespace }}.svc:{{ int $x.port }}"
    tlsConfig:
      certFile: /etc/muster/tls/tls.crt
      keyFile: /etc/muster/tls/tls.key
      caFile: /etc/muster/tls/ca.crt
    filterVerb: filter
    prioritizeVerb: prioritize
    preemptVerb: preempt
    {{- if $s.bindVerb }}
    # Muster binds, holding each gang member at a barrier until the gang's minimum has
    # reached bind (MUSTER_BIND_TIMEOUT, extender.bindTimeout).
    bindVerb: bind
    {{- end }}
    weight: {{ int $s.weight }}
    # Exceeds MUSTER_BIND_TIMEOUT (checked when the chart renders).
    httpTimeout: {{ $s.httpTimeout }}
    # Node names only (Muster watches nodes itself): small bodies, fast filters.
    nodeCacheCapable: true
    ignorable: {{ $s.ignorable }}
    # No managedResources unless given (values.yaml): with any, pods whose GPUs come
    # through spec.resourceClaims alone (DRA) never reach filter or bind.
    {{- with $s.managedResources }}
    managedResources:
      {{- range . }}
      - name: {{ required "values: scheduler.managedResources[] needs a name" .name }}
        ignoredByScheduler: {{ .ignoredByScheduler | default false }}
      {{- end }}
    {{- end }}
{{- end }}

{{- /* The MutatingWebhookConfiguration (manifests/webhook.yaml); list root caBundle. */ -}}
{{- define "muster.webhook" }}
{{- $ := index . 0 }}
{{- $ca := index . 1 }}
{{- $w := $.Values.webhook }}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: muster-gate
  {{- with $w.certManagerInjectFrom }}
  annotations:
    cert-manager.io/inject-ca-from: {{ . }}
  {{- end }}
  {{- include "muster.labels" (list $ (include "muster.selector" "extender" | fromYaml)) }}
webhooks:
  - name: gate.muster.dev
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Ignore
    reinvocationPolicy: Never
    timeoutSeconds: {{ int $w.timeoutSeconds }}
    matchPolicy: Equivalent
    clientConfig:
      service: {name: muster, namespace: {{ $.Release.Namespace }}, port: 443, path: /admission/gate}
      {{- with $ca }}
      caBundle: {{ . }}
      {{- end }}
    rules:
      - operations: [CREATE]
        apiGroups: [""]
        apiVersions: [v1]
        resources: [pods]
        scope: Namespaced
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, {{ $.Release.Namespace }}]}
        - {key: muster.dev/gating, operator: NotIn, values: ["off"]}
    objectSelector:
      matchExpressions:
        - {key: muster.dev/gating, operator: NotIn, values: ["off"]}
    matchConditions:
      - name: muster-scheduler
        expression: "object.spec.schedulerName == 'muster'"
      - name: may-join-a-gang
        expression: "has(object.metadata.ownerReferences) || (has(object.metadata.labels) && ['app.kubernetes.io/instance', 'app.kubernetes.io/name', 'app.kubernetes.io/part-of', 'batch.kubernetes.io/job-name', 'jobset.sigs.k8s.io/jobset-name', 'leaderworkerset.sigs.k8s.io/name', 'nvidia.com/dynamo-graph-deployment-name', 'ray.io/cluster', 'serving.knative.dev/service', 'serving.kserve.io/inferencegraph', 'serving.kserve.io/inferenceservice', 'training.kubeflow.org/job-name'].exists(l, l in object.metadata.labels))"
{{- end }}

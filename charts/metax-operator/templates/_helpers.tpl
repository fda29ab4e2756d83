{{/* Common labels of every object the chart creates. */}}
{{- define "metax-operator.labels" -}}
app.kubernetes.io/name: metax-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: metax-gpu-operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator image: operator.image.repository, else <registry>/metax-operator; tag = appVersion; pinned
     by operator.imageDigests["metax-operator"] when the release wrote it (metax_core/cluster/image_refs.py).
     An empty registry is refused (R-RELEASE: no silent Docker Hub; metax_core/spec/names.registry_problem). */}}
{{- define "metax-operator.image" -}}
{{- $registry := required "registry: is required: the registry every image is pulled from, like --set registry=registry.example.com/metax (there is no default)" .Values.registry -}}
{{- $pin := "" -}}
{{- $repo := .Values.operator.image.repository -}}
{{- if not $repo -}}
{{- $repo = printf "%s/metax-operator" $registry -}}
{{- with index (.Values.operator.imageDigests | default dict) "metax-operator" -}}
{{- $pin = printf "@%s" . -}}
{{- end -}}
{{- end -}}
{{- printf "%s:%s%s" $repo (default .Chart.AppVersion .Values.operator.image.tag) $pin -}}
{{- end -}}

{{/* The ClusterOperator spec: the values without the chart-only `operator` section. The deprecated
     `--set-file tolerations=<file>` (§3.2.4) passes the file's text; it holds `tolerations: [...]` or a list.
     Strings that stand for a boolean or an integer become one (_values.tpl, generated). */}}
{{- define "metax-operator.spec" -}}
{{- $spec := omit (deepCopy .Values) "operator" -}}
{{- if kindIs "string" .Values.tolerations -}}
{{- $doc := fromYaml .Values.tolerations -}}
{{- if hasKey $doc "tolerations" -}}
{{- $_ := set $spec "tolerations" (get $doc "tolerations") -}}
{{- else -}}
{{- $_ := set $spec "tolerations" (fromYamlArray .Values.tolerations) -}}
{{- end -}}
{{- end -}}
{{- $_ := include "metax-operator.canonical" $spec -}}
{{- toYaml $spec -}}
{{- end -}}

{{/* A webhook clientConfig: the Service, or operator.webhook.url (an operator outside the cluster). */}}
{{- define "metax-operator.webhookClient" -}}
{{- if .Values.operator.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" .Values.operator.webhook.url) .path | quote }}
{{- else }}
service:
  name: metax-operator-webhook
  namespace: {{ .Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- end -}}

{{/*
The ServiceAccount token as the kubelet would inject it (a bound, expiring token, the cluster's CA, the namespace),
mounted only into the container that calls the API: every pod sets automountServiceAccountToken: false (issue 38;
metax_core/cluster/pod_security.py renders the same for the node agents).
*/}}
{{- define "metax-operator.tokenVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end }}

{{- define "metax-operator.tokenMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end }}

{{/* A Helm hook Job running one metax-operator command with the operator's image and ServiceAccount: the pre-delete
cleanup and the pre-upgrade CRD apply. Arguments: root (the chart context), name, hook, component, deadline (s),
command (a list). */}}
{{- define "metax-operator.hookJob" -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "metax-operator.labels" .root | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "0"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 2
  activeDeadlineSeconds: {{ .deadline }}
  template:
    metadata:
      labels:
        {{- include "metax-operator.labels" .root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      serviceAccountName: metax-operator
      automountServiceAccountToken: false
      restartPolicy: Never
      {{- with .root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- range . }}
        - name: {{ . }}
        {{- end }}
      {{- end }}
      {{- /* A hook runs where the operator may run (a dedicated node pool, control-plane taints). */}}
      {{- with .root.Values.operator.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .root.Values.operator.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .root.Values.operator.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .component }}
          image: {{ include "metax-operator.image" .root }}
          imagePullPolicy: {{ .root.Values.operator.image.pullPolicy }}
          command: {{ toJson .command }}
          resources:
            requests: {cpu: 10m, memory: 64Mi}
            limits: {cpu: 200m, memory: 128Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            {{- include "metax-operator.tokenMount" .root | nindent 12 }}
      volumes:
        {{- include "metax-operator.tokenVolume" .root | nindent 8 }}
{{- end -}}

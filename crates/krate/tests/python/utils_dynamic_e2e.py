"""The Python client's utilities and dynamic client against krate: create_from_yaml,
strategic and server-side apply patches, discovery-driven dynamic resources. Run by
e2e_python.rs with KUBECONFIG set; prints PASS."""

import os
import tempfile

from kubernetes import client, config, dynamic, utils

config.load_kube_config()
api_client = client.ApiClient()

manifest = """
apiVersion: v1
kind: Namespace
metadata:
  name: py-utils
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: py-utils
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: py-utils
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx
        env: [{name: A, value: "1"}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: py-utils
spec:
  selector: {app: web}
  ports: [{port: 80}]
"""
with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    f.write(manifest)
created = utils.create_from_yaml(api_client, f.name)
os.unlink(f.name)
kinds = sorted(o.kind for group in created for o in group)
assert kinds == ["ConfigMap", "Deployment", "Namespace", "Service"], kinds

apps = client.AppsV1Api()
# A dict body is a strategic merge patch: the env list merges on its name.
apps.patch_namespaced_deployment(
    "web", "py-utils", {"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}}}}
)
env = apps.read_namespaced_deployment("web", "py-utils").spec.template.spec.containers[0].env
assert sorted(e.name for e in env) == ["A", "B"], env

# The dynamic client discovers resources and applies server-side.
dyn = dynamic.DynamicClient(api_client)
cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
got = cms.get(name="settings", namespace="py-utils")
assert got.data.mode == "fast"
applied = cms.server_side_apply(
    body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "namespace": "py-utils"}, "data": {"k": "v"}},
    name="applied",
    namespace="py-utils",
    field_manager="py-e2e",
)
assert applied.data.k == "v"
assert applied.metadata.managedFields[0].manager == "py-e2e"
deploys = dyn.resources.get(api_version="apps/v1", kind="Deployment")
listed = deploys.get(namespace="py-utils")
assert [i.metadata.name for i in listed.items] == ["web"]
print("PASS")

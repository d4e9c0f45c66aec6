"""The official Python client against krate: create, list, watch, patch, delete through
its generated API classes. Run by e2e_python.rs with KUBECONFIG set; prints PASS."""

import threading

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config()
core = client.CoreV1Api()
apps = client.AppsV1Api()

ns = client.V1Namespace(metadata=client.V1ObjectMeta(name="py-e2e"))
core.create_namespace(ns)

# Watch in the background from the namespace's current revision.
start_rv = core.list_namespaced_config_map("py-e2e").metadata.resource_version
seen = []
done = threading.Event()


def watcher():
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, "py-e2e", resource_version=start_rv, timeout_seconds=20):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()
    done.set()


t = threading.Thread(target=watcher, daemon=True)
t.start()

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings", labels={"app": "py"}), data={"a": "1"})
created = core.create_namespaced_config_map("py-e2e", cm)
assert created.metadata.uid, "the server assigns a uid"

items = core.list_namespaced_config_map("py-e2e", label_selector="app=py").items
assert [i.metadata.name for i in items] == ["settings"], items

patched = core.patch_namespaced_config_map(
    "settings", "py-e2e", {"data": {"b": "2"}}, _content_type="application/merge-patch+json"
)
assert patched.data == {"a": "1", "b": "2"}, patched.data

dep = client.V1Deployment(
    metadata=client.V1ObjectMeta(name="web"),
    spec=client.V1DeploymentSpec(
        selector=client.V1LabelSelector(match_labels={"app": "web"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "web"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    ),
)
apps.create_namespaced_deployment("py-e2e", dep)
scale = apps.patch_namespaced_deployment_scale(
    "web", "py-e2e", {"spec": {"replicas": 4}}, _content_type="application/merge-patch+json"
)
assert scale.spec.replicas == 4

core.delete_namespaced_config_map("settings", "py-e2e")
try:
    core.read_namespaced_config_map("settings", "py-e2e")
    raise AssertionError("deleted object still readable")
except ApiException as e:
    assert e.status == 404, e.status

assert done.wait(20), "the watch saw the delete"
# kube-root-ca.crt, published by a controller, may come and go beside it.
seen = [e for e in seen if e[1] == "settings"]
assert seen == [("ADDED", "settings"), ("MODIFIED", "settings"), ("DELETED", "settings")], seen
print("PASS")

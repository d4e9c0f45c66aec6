#!/usr/bin/env python3
"""Generate crates/krate-api/src/generated/resources.rs: the table of built-in
resources that upstream kube-apiserver v1.36 serves by default.

Usage (from anywhere):
    python3 hack/gen-resources.py [SWAGGER_JSON] [--out PATH] [--no-rustfmt]

SWAGGER_JSON defaults to ../shared/data/openapi/swagger-v1.36.json relative to
the repository root. The spec supplies resources, kinds, scopes, subresources
and verbs; the hand table below supplies what the spec does not say (which
group-versions are on by default, discovery order, short names, categories).
See hack/README.md for where each hand-written fact comes from.

Stdlib only. The output is a pure function of the spec file and this script.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SPEC = os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "data", "openapi", "swagger-v1.36.json"))
DEFAULT_OUT = os.path.join(REPO_ROOT, "crates", "krate-api", "src", "generated", "resources.rs")

# ---------------------------------------------------------------------------
# Hand table: facts the OpenAPI spec does not carry.
# ---------------------------------------------------------------------------

# Group-versions served by default, as (group, group priority, [(version,
# version priority)]). Priorities are upstream's APIService priorities
# (DefaultGenericAPIServicePriorities in pkg/controlplane/apiserver/aggregator.go
# plus the kube-apiserver additions): /apis lists groups by group priority,
# highest first, ties by name; inside a group, versions by version priority,
# highest first, and the first is the preferred version. The aggregator's own
# group (apiregistration.k8s.io) is always listed first; the core group ("")
# is served at /api, not /apis.
DEFAULT_GROUP_VERSIONS = [
    ("", 18000, [("v1", 1)]),
    ("apiregistration.k8s.io", None, [("v1", 15)]),  # None: pinned first by the aggregator
    ("apps", 17800, [("v1", 15)]),
    ("events.k8s.io", 17750, [("v1", 15)]),
    ("authentication.k8s.io", 17700, [("v1", 15)]),
    ("authorization.k8s.io", 17600, [("v1", 15)]),
    ("autoscaling", 17500, [("v2", 30), ("v1", 15)]),
    ("batch", 17400, [("v1", 15)]),
    ("certificates.k8s.io", 17300, [("v1", 15)]),
    ("networking.k8s.io", 17200, [("v1", 15)]),
    ("policy", 17100, [("v1", 15)]),
    ("rbac.authorization.k8s.io", 17000, [("v1", 15)]),
    ("storage.k8s.io", 16800, [("v1", 15)]),
    ("admissionregistration.k8s.io", 16700, [("v1", 15)]),
    ("apiextensions.k8s.io", 16700, [("v1", 15)]),
    ("scheduling.k8s.io", 16600, [("v1", 15)]),
    ("coordination.k8s.io", 16500, [("v1", 15)]),
    ("node.k8s.io", 16300, [("v1", 15)]),
    ("discovery.k8s.io", 16200, [("v1", 15)]),
    ("flowcontrol.apiserver.k8s.io", 16100, [("v1", 21)]),
    ("resource.k8s.io", 15900, [("v1", 15)]),
]

# Group-versions present in the v1.36 spec but NOT served by default (alpha and
# beta APIs are off unless enabled with --runtime-config, KEP-3136). Every
# group-version in the spec must be listed either above or here, so a new spec
# cannot silently add or drop one.
NOT_DEFAULT_GROUP_VERSIONS = {
    ("admissionregistration.k8s.io", "v1alpha1"): "alpha (MutatingAdmissionPolicy), off by default",
    ("admissionregistration.k8s.io", "v1beta1"): "beta (MutatingAdmissionPolicy), off by default",
    ("certificates.k8s.io", "v1alpha1"): "alpha (ClusterTrustBundle), off by default",
    ("certificates.k8s.io", "v1beta1"): "beta (ClusterTrustBundle, PodCertificateRequest), off by default",
    ("coordination.k8s.io", "v1alpha2"): "alpha (LeaseCandidate), off by default",
    ("coordination.k8s.io", "v1beta1"): "beta (LeaseCandidate), off by default",
    ("internal.apiserver.k8s.io", "v1alpha1"): "alpha (StorageVersion), off by default",
    ("networking.k8s.io", "v1beta1"): "beta (IPAddress, ServiceCIDR; GA in v1), off by default",
    ("resource.k8s.io", "v1alpha3"): "alpha (DeviceTaintRule, ResourcePoolStatusRequest), off by default",
    ("resource.k8s.io", "v1beta1"): "beta (DRA; GA in v1), off by default",
    ("resource.k8s.io", "v1beta2"): "beta (DRA, DeviceTaintRule), off by default",
    ("scheduling.k8s.io", "v1alpha2"): "alpha (Workload, PodGroup), off by default",
    ("storage.k8s.io", "v1beta1"): "beta (VolumeAttributesClass; GA in v1), off by default",
    ("storagemigration.k8s.io", "v1beta1"): "beta (StorageVersionMigration), off by default",
}

# Short names, keyed by (group, plural); they apply to every served version of
# the resource. From each registry's ShortNames() (pkg/registry/**/storage/
# storage.go, apiextensions-apiserver and kube-aggregator registries).
SHORT_NAMES = {
    ("", "componentstatuses"): ["cs"],
    ("", "configmaps"): ["cm"],
    ("", "endpoints"): ["ep"],
    ("", "events"): ["ev"],
    ("", "limitranges"): ["limits"],
    ("", "namespaces"): ["ns"],
    ("", "nodes"): ["no"],
    ("", "persistentvolumeclaims"): ["pvc"],
    ("", "persistentvolumes"): ["pv"],
    ("", "pods"): ["po"],
    ("", "replicationcontrollers"): ["rc"],
    ("", "resourcequotas"): ["quota"],
    ("", "serviceaccounts"): ["sa"],
    ("", "services"): ["svc"],
    ("apiextensions.k8s.io", "customresourcedefinitions"): ["crd", "crds"],
    ("apps", "daemonsets"): ["ds"],
    ("apps", "deployments"): ["deploy"],
    ("apps", "replicasets"): ["rs"],
    ("apps", "statefulsets"): ["sts"],
    ("autoscaling", "horizontalpodautoscalers"): ["hpa"],
    ("batch", "cronjobs"): ["cj"],
    ("certificates.k8s.io", "certificatesigningrequests"): ["csr"],
    ("events.k8s.io", "events"): ["ev"],
    ("networking.k8s.io", "ingresses"): ["ing"],
    ("networking.k8s.io", "ipaddresses"): ["ip"],
    ("networking.k8s.io", "networkpolicies"): ["netpol"],
    ("policy", "poddisruptionbudgets"): ["pdb"],
    ("scheduling.k8s.io", "priorityclasses"): ["pc"],
    ("storage.k8s.io", "storageclasses"): ["sc"],
    ("storage.k8s.io", "volumeattributesclasses"): ["vac"],
}

# Categories, keyed by (group, plural), from each registry's Categories().
_ALL = ["all"]
_API_EXTENSIONS = ["api-extensions"]
CATEGORIES = {
    ("", "pods"): _ALL,
    ("", "replicationcontrollers"): _ALL,
    ("", "services"): _ALL,
    ("apps", "daemonsets"): _ALL,
    ("apps", "deployments"): _ALL,
    ("apps", "replicasets"): _ALL,
    ("apps", "statefulsets"): _ALL,
    ("autoscaling", "horizontalpodautoscalers"): _ALL,
    ("batch", "cronjobs"): _ALL,
    ("batch", "jobs"): _ALL,
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"): _API_EXTENSIONS,
    ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"): _API_EXTENSIONS,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): _API_EXTENSIONS,
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): _API_EXTENSIONS,
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): _API_EXTENSIONS,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): _API_EXTENSIONS,
    ("apiextensions.k8s.io", "customresourcedefinitions"): _API_EXTENSIONS,
    ("apiregistration.k8s.io", "apiservices"): _API_EXTENSIONS,
}

# ---------------------------------------------------------------------------
# Spec reading.
# ---------------------------------------------------------------------------

# x-kubernetes-action -> discovery verb. "connect" is expanded per HTTP method.
ACTION_VERBS = {
    "get": "get",
    "list": "list",
    "watch": "watch",
    "watchlist": "watch",
    "post": "create",
    "put": "update",
    "patch": "patch",
    "delete": "delete",
    "deletecollection": "deletecollection",
}
# HTTP methods of connect operations -> discovery verb (HEAD, OPTIONS are not verbs).
CONNECT_METHOD_VERBS = {"get": "get", "post": "create", "put": "update", "patch": "patch", "delete": "delete"}
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")

PATH_RE = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/(?P<rest>.+)$")
NAMESPACED_PREFIX = "namespaces/{namespace}/"


class Res:
    def __init__(self):
        self.verbs = set()
        self.kinds = set()
        self.namespaced = False


def read_spec(path):
    with open(path, "rb") as f:
        raw = f.read()
    return json.loads(raw), hashlib.sha256(raw).hexdigest()


def collect(spec):
    """Return {(group, version): {resource_path: Res}}; resource_path is
    "plural" or "plural/subresource"."""
    out = defaultdict(lambda: defaultdict(Res))
    for path, item in spec["paths"].items():
        m = PATH_RE.match(path)
        if not m:
            continue
        group = m.group("group") or ""
        version = m.group("core") or m.group("version")
        rest = m.group("rest")
        if rest.startswith("watch/"):
            rest = rest[len("watch/") :]
        namespaced = rest.startswith(NAMESPACED_PREFIX)
        if namespaced:
            rest = rest[len(NAMESPACED_PREFIX) :]
        segs = [s for s in rest.split("/") if s and not s.startswith("{")]
        if not segs:
            continue
        if len(segs) > 2:
            raise SystemExit(f"unexpected path shape: {path}")
        key = "/".join(segs)
        for method in HTTP_METHODS:
            op = item.get(method)
            if not isinstance(op, dict) or "x-kubernetes-action" not in op:
                continue
            r = out[(group, version)][key]
            action = op["x-kubernetes-action"]
            if action == "connect":
                verb = CONNECT_METHOD_VERBS.get(method)
            elif action in ACTION_VERBS:
                verb = ACTION_VERBS[action]
            else:
                raise SystemExit(f"unknown action {action!r} on {method} {path}")
            if verb:
                r.verbs.add(verb)
            gvk = op.get("x-kubernetes-group-version-kind")
            if gvk:
                r.kinds.add((gvk["group"], gvk["version"], gvk["kind"]))
            if namespaced:
                r.namespaced = True
    return out


def one(s, what):
    if len(s) != 1:
        raise SystemExit(f"expected exactly one {what}, got {sorted(s)}")
    return next(iter(s))


def build_model(spec):
    """Return (group_versions, resources) in discovery order."""
    found = collect(spec)

    enabled = {(g, v) for g, _, vs in DEFAULT_GROUP_VERSIONS for v, _ in vs}
    for gv in sorted(found):
        if gv not in enabled and gv not in NOT_DEFAULT_GROUP_VERSIONS:
            raise SystemExit(f"group-version {gv} is in the spec but not classified in the hand table")
    for gv in sorted(enabled):
        if gv not in found:
            raise SystemExit(f"group-version {gv} is enabled in the hand table but not in the spec")
    for gv in sorted(NOT_DEFAULT_GROUP_VERSIONS):
        if gv not in found:
            raise SystemExit(f"group-version {gv} is listed as not-default but not in the spec")

    pinned = [e for e in DEFAULT_GROUP_VERSIONS if e[1] is None]
    ranked = sorted((e for e in DEFAULT_GROUP_VERSIONS if e[1] is not None), key=lambda e: (-e[1], e[0]))
    core = [e for e in ranked if e[0] == ""]
    rest = [e for e in ranked if e[0] != ""]
    group_versions = []
    for g, _, vs in core + pinned + rest:
        group_versions.append((g, [v for v, _ in sorted(vs, key=lambda x: -x[1])]))

    used_short, used_cat = set(), set()
    resources = []
    for g, versions in group_versions:
        for v in versions:
            entries = found[(g, v)]
            for plural in sorted(k for k in entries if "/" not in k):
                r = entries[plural]
                kg, kv, kind = one(r.kinds, f"kind for {g}/{v} {plural}")
                if (kg, kv) != (g, v):
                    raise SystemExit(f"{g}/{v} {plural}: kind from another group-version {kg}/{kv}")
                subs = []
                for key in sorted(k for k in entries if k.startswith(plural + "/")):
                    s = entries[key]
                    sg, sv, skind = one(s.kinds, f"kind for {g}/{v} {key}")
                    if (sg, sv) == (g, v):
                        sg, sv = "", ""
                    if s.namespaced != r.namespaced:
                        raise SystemExit(f"{g}/{v} {key}: scope differs from its resource")
                    subs.append(
                        {"name": key.split("/", 1)[1], "group": sg, "version": sv, "kind": skind,
                         "verbs": sorted(s.verbs)}
                    )
                used_short.add((g, plural))
                used_cat.add((g, plural))
                resources.append(
                    {
                        "group": g,
                        "version": v,
                        "kind": kind,
                        "plural": plural,
                        "singular": kind.lower(),
                        "namespaced": r.namespaced,
                        "verbs": sorted(r.verbs),
                        "short_names": SHORT_NAMES.get((g, plural), []),
                        "categories": CATEGORIES.get((g, plural), []),
                        "subresources": subs,
                    }
                )
            orphans = [k for k in entries if "/" in k and k.split("/")[0] not in entries]
            if orphans:
                raise SystemExit(f"{g}/{v}: subresources without a resource: {orphans}")
    for table, used, name in ((SHORT_NAMES, used_short, "SHORT_NAMES"), (CATEGORIES, used_cat, "CATEGORIES")):
        unused = sorted(set(table) - used)
        if unused:
            raise SystemExit(f"{name} entries match no served resource: {unused}")
    return group_versions, resources


# ---------------------------------------------------------------------------
# Rust output.
# ---------------------------------------------------------------------------


def rs_str(s):
    return json.dumps(s)  # ASCII names only; JSON string escaping is valid Rust here


def rs_list(items):
    return "&[" + ", ".join(rs_str(i) for i in items) + "]"


def render(group_versions, resources, spec_name, spec_sha):
    o = []
    w = o.append
    w("// @generated by hack/gen-resources.py. DO NOT EDIT.")
    w("//")
    w("// Built-in resources that upstream kube-apiserver v1.36 serves by default, as its")
    w("// discovery reports them. Source: the upstream OpenAPI v2 spec")
    w(f"// ({spec_name}, sha256 {spec_sha})")
    w("// plus the hand table in hack/gen-resources.py (see hack/README.md).")
    w("//")
    w("// Regenerate from the repository root:")
    w("//     python3 hack/gen-resources.py [path/to/swagger-v1.36.json]")
    w("")
    w("/// One subresource of a resource, as discovery reports it.")
    w("#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]")
    w("pub struct SubresourceDef {")
    w("    /// Subresource name without the resource, e.g. `status` for `pods/status`.")
    w("    pub name: &'static str,")
    w("    /// Group of the kind served, or \"\" when it is the parent's group-version.")
    w("    pub group: &'static str,")
    w("    /// Version of the kind served, or \"\" when it is the parent's group-version.")
    w("    pub version: &'static str,")
    w("    pub kind: &'static str,")
    w("    /// Sorted alphabetically, like upstream discovery.")
    w("    pub verbs: &'static [&'static str],")
    w("}")
    w("")
    w("/// One resource in one group-version, as discovery reports it.")
    w("#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]")
    w("pub struct ResourceDef {")
    w("    /// \"\" for the core group.")
    w("    pub group: &'static str,")
    w("    pub version: &'static str,")
    w("    pub kind: &'static str,")
    w("    pub plural: &'static str,")
    w("    pub singular: &'static str,")
    w("    pub namespaced: bool,")
    w("    /// Sorted alphabetically, like upstream discovery.")
    w("    pub verbs: &'static [&'static str],")
    w("    pub short_names: &'static [&'static str],")
    w("    pub categories: &'static [&'static str],")
    w("    /// Sorted by name.")
    w("    pub subresources: &'static [SubresourceDef],")
    w("}")
    w("")
    w("/// Group-versions in discovery order, each group's preferred version first.")
    w("///")
    w("/// The first entry is the core group (\"\"), served at `/api`; the rest are listed")
    w("/// in the order upstream's `/apis` lists groups.")
    w("pub static GROUP_VERSIONS: &[(&str, &[&str])] = &[")
    for g, vs in group_versions:
        w(f"    ({rs_str(g)}, {rs_list(vs)}),")
    w("];")
    w("")
    w("/// Every resource, grouped by `GROUP_VERSIONS` order and sorted by plural inside a")
    w("/// group-version (the order of upstream's per-group-version discovery).")
    w("pub static RESOURCES: &[ResourceDef] = &[")
    for r in resources:
        w("    ResourceDef {")
        w(f"        group: {rs_str(r['group'])},")
        w(f"        version: {rs_str(r['version'])},")
        w(f"        kind: {rs_str(r['kind'])},")
        w(f"        plural: {rs_str(r['plural'])},")
        w(f"        singular: {rs_str(r['singular'])},")
        w(f"        namespaced: {'true' if r['namespaced'] else 'false'},")
        w(f"        verbs: {rs_list(r['verbs'])},")
        w(f"        short_names: {rs_list(r['short_names'])},")
        w(f"        categories: {rs_list(r['categories'])},")
        if not r["subresources"]:
            w("        subresources: &[],")
        else:
            w("        subresources: &[")
            for s in r["subresources"]:
                w("            SubresourceDef {")
                w(f"                name: {rs_str(s['name'])},")
                w(f"                group: {rs_str(s['group'])},")
                w(f"                version: {rs_str(s['version'])},")
                w(f"                kind: {rs_str(s['kind'])},")
                w(f"                verbs: {rs_list(s['verbs'])},")
                w("            },")
            w("        ],")
        w("    },")
    w("];")
    return "\n".join(o) + "\n"


def rustfmt(text):
    exe = shutil.which("rustfmt")
    if not exe:
        print("note: rustfmt not found; output left as generated", file=sys.stderr)
        return text
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "resources.rs")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        cfg = os.path.join(REPO_ROOT, "rustfmt.toml")
        if os.path.exists(cfg):  # format exactly as `cargo fmt` in this repository would
            opts = ["--config-path", cfg]
        else:
            opts = ["--config", "max_width=120"]
        subprocess.run([exe, "--edition", "2024", *opts, p], check=True)
        with open(p, encoding="utf-8") as f:
            return f.read()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", nargs="?", default=DEFAULT_SPEC, help="upstream swagger.json (OpenAPI v2)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output .rs path")
    ap.add_argument("--no-rustfmt", action="store_true", help="do not run rustfmt on the output")
    args = ap.parse_args(argv)

    spec, sha = read_spec(args.spec)
    group_versions, resources = build_model(spec)
    text = render(group_versions, resources, os.path.basename(args.spec), sha)
    if not args.no_rustfmt:
        text = rustfmt(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    n_sub = sum(len(r["subresources"]) for r in resources)
    print(
        f"wrote {os.path.relpath(args.out)}: {len(group_versions)} groups, "
        f"{sum(len(v) for _, v in group_versions)} group-versions, {len(resources)} resources, {n_sub} subresources",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Generates crates/krate-api/src/generated/shape.rs from the resource table: one arm per
built-in kind that decodes an object into its k8s-openapi type. Run from the repo root."""
import re, subprocess
src = open('crates/krate-api/src/generated/resources.rs').read()
defs = re.findall(r'ResourceDef \{\s*group: "([^"]*)",\s*version: "([^"]*)",\s*kind: "([^"]*)"', src)
MODS = {
    '': 'api::core', 'apps': 'api::apps', 'batch': 'api::batch', 'autoscaling': 'api::autoscaling', 'policy': 'api::policy',
    'rbac.authorization.k8s.io': 'api::rbac', 'networking.k8s.io': 'api::networking', 'storage.k8s.io': 'api::storage',
    'coordination.k8s.io': 'api::coordination', 'discovery.k8s.io': 'api::discovery', 'events.k8s.io': 'api::events',
    'node.k8s.io': 'api::node', 'scheduling.k8s.io': 'api::scheduling', 'certificates.k8s.io': 'api::certificates',
    'admissionregistration.k8s.io': 'api::admissionregistration',
    'apiextensions.k8s.io': 'apiextensions_apiserver::pkg::apis::apiextensions',
    'apiregistration.k8s.io': 'kube_aggregator::pkg::apis::apiregistration', 'flowcontrol.apiserver.k8s.io': 'api::flowcontrol',
    'authentication.k8s.io': 'api::authentication', 'authorization.k8s.io': 'api::authorization', 'resource.k8s.io': 'api::resource',
}
seen, arms = set(), []
for g, v, k in defs:
    if (g, v, k) in seen or g not in MODS:
        continue
    seen.add((g, v, k))
    arms.append(f'        ("{g}", "{v}", "{k}") => decode::<k8s_openapi::{MODS[g]}::{v}::{k}>(obj),')
HEAD = open('crates/krate-api/src/generated/shape.rs').read().split('    match (group, version, kind) {')[0]
open('crates/krate-api/src/generated/shape.rs', 'w').write(
    HEAD + '    match (group, version, kind) {\n' + '\n'.join(arms) + '\n        _ => Ok(Vec::new()),\n    }\n}\n')
subprocess.run(['rustfmt', '--edition', '2024', '--config', 'max_width=120', 'crates/krate-api/src/generated/shape.rs'])

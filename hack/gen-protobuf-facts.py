#!/usr/bin/env python3
"""Writes crates/krate-api/src/generated/protobuf.rs: for every built-in definition of
upstream's v1.36 OpenAPI spec that has a protobuf message, the message's fields — JSON
name, field number, wire type, repeated or map, nested message — so that krate can
transcode JSON objects to and from `application/vnd.kubernetes.protobuf`.

    python3 hack/gen-protobuf-facts.py [path/to/swagger.json [path/to/k8s-pb/src]]

Field numbers and wire types come from the k8s-pb crate's sources (prost attributes,
generated from upstream's generated.proto files); JSON names and shapes from the spec.
Names are matched case- and punctuation-insensitively (prost `pod_ip` is JSON `podIP`).
Facts only; no code is taken. See hack/README.md.
"""
import glob, hashlib, json, os, re, subprocess, sys

SPEC = sys.argv[1] if len(sys.argv) > 1 else '../shared/data/openapi/swagger-v1.36.json'
PB = sys.argv[2] if len(sys.argv) > 2 else (sorted(glob.glob(os.path.expanduser(
    '~/.cargo/registry/src/*/k8s-pb-0.9.0/src'))) or [''])[0]
OUT = 'crates/krate-api/src/generated/protobuf.rs'

raw = open(SPEC, 'rb').read()
spec = json.loads(raw)
defs = spec['definitions']

# Definitions whose protobuf form is special (handled by the transcoder itself).
SPECIAL = {
    'io.k8s.apimachinery.pkg.apis.meta.v1.Time': 'Time',
    'io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime': 'MicroTime',
    'io.k8s.apimachinery.pkg.apis.meta.v1.Duration': 'Duration',
    'io.k8s.apimachinery.pkg.api.resource.Quantity': 'Quantity',
    'io.k8s.apimachinery.pkg.util.intstr.IntOrString': 'IntOrString',
    'io.k8s.apimachinery.pkg.runtime.RawExtension': 'RawJson',
    'io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1': 'RawJson',
    'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON': 'RawJson',
}
# JSONSchemaProps{OrArray,OrBool,OrStringArray}: a schema, or an array / bool / string
# array, in one JSON value (apiextensions' own encoding).
SCHEMA_OR = {
    'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray': 'SchemaOrArray',
    'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool': 'SchemaOrBool',
    'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray': 'SchemaOrStringArray',
}
SCHEMA_PROPS = 'io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps'

# Pointer fields in upstream's Go types whose zero value ("" / 0 / false) means something
# other than unset, and whose description does not say so in a way the rule below sees.
# A request's zero-valued scalars are dropped (Go's omitempty) unless the field is listed
# here, is required, or its description names a non-zero default or a meaning for zero.
KEEP_ZERO = {
    'storageClassName', 'volumeAttributesClassName', 'automountServiceAccountToken',
    'allowPrivilegeEscalation', 'ttlSecondsAfterFinished', 'gracePeriodSeconds',
    'replicas', 'backoffLimit', 'backoffLimitPerIndex', 'maxFailedIndexes', 'parallelism',
    'completions', 'minAvailable', 'maxUnavailable', 'maxSurge', 'successfulJobsHistoryLimit',
    'failedJobsHistoryLimit', 'revisionHistoryLimit', 'startingDeadlineSeconds',
    'terminationGracePeriodSeconds', 'activeDeadlineSeconds', 'expirationSeconds',
    'minReplicas', 'progressDeadlineSeconds', 'suspend', 'priority', 'value',
    'defaultMode', 'mode', 'podFailurePolicy', 'orphanDependents', 'hostUsers',
    'enableServiceLinks', 'publishNotReadyAddresses', 'allocateLoadBalancerNodePorts',
    'ready', 'serving', 'terminating', 'port',
}
ZERO_MEANING = re.compile(
    r'([Dd]efaults? (?:to|is|value is)[: ]+(?!false\b|0\b|""|empty|nil|unset)\S)'
    r'|\b(?:set to|is|be|of) (?:zero|0)\b|\bzero (?:means|indicates|value)\b|\b0 (?:means|indicates)\b'
    r'|\bfalse (?:means|indicates)\b|\bset to false\b')


def norm(s):
    return re.sub(r'[^a-z0-9]', '', s.lower())


def module_prefix(parts):
    """k8s-pb module path → the spec's definition prefix."""
    if parts[0] == 'api':
        return 'io.k8s.api.' + '.'.join(parts[1:])
    if parts[0] == 'apimachinery':
        return 'io.k8s.apimachinery.' + '.'.join(parts[1:])
    if parts[0] == 'apiextensions_apiserver':
        return 'io.k8s.apiextensions-apiserver.' + '.'.join(parts[1:])
    if parts[0] == 'kube_aggregator':
        return 'io.k8s.kube-aggregator.' + '.'.join(parts[1:])
    return None


# --- k8s-pb: messages, fields (tag, prost kind, type path) ---
FIELD = re.compile(r'#\[prost\(([^)]*)\)\]\s*pub (r#)?(\w+):\s*([^;]*?),\s*(?=(?:///|#\[|pub |\}))', re.S)
STRUCT = re.compile(r'pub struct (\w+) \{(\}|.*?\n\})', re.S)
pb = {}  # prefix.Name (lowercased name) -> (module parts, Name, [fields])
for path in glob.glob(os.path.join(PB, '**', 'mod.rs'), recursive=True):
    parts = os.path.relpath(os.path.dirname(path), PB).split(os.sep)
    prefix = module_prefix(parts)
    if prefix is None:
        continue
    text = open(path).read()
    for m in STRUCT.finditer(text):
        fields = []
        for f in FIELD.finditer(m.group(2)):
            attrs, name, ty = f.group(1), f.group(3), re.sub(r'\s+', '', f.group(4))
            tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
            kind = attrs.split(',')[0].split('=')[0].strip()
            mapv = re.search(r'btree_map = "string, (\w+)"', attrs)
            fields.append({'name': name, 'tag': tag, 'kind': kind, 'repeated': 'repeated' in attrs,
                           'map': mapv.group(1) if mapv else None, 'ty': ty,
                           'packed': 'packed = "false"' not in attrs})
        pb[(prefix + '.' + m.group(1)).lower()] = (parts, m.group(1), fields)

# Fields and messages upstream's v1.36 generated.proto has and k8s-pb 0.9.0 (v1.35) lacks:
# numbers and types read from v1.36's generated.proto files (facts). One tuple a field:
# (name, tag, prost kind, repeated, map value kind or None).
V136 = {
    'io.k8s.api.certificates.v1beta1.PodCertificateRequestSpec': [('stub_pkcs10_request', 12, 'bytes', False, None)],
    'io.k8s.api.core.v1.PodSpec': [('scheduling_group', 43, 'message', False, None)],
    'io.k8s.api.core.v1.PodStatus': [('node_allocatable_resource_claim_statuses', 21, 'message', True, None)],
    'io.k8s.api.core.v1.ResourceHealth': [('message', 6, 'string', False, None)],
    'io.k8s.api.core.v1.VolumeMountStatus': [('volume_status', 5, 'message', False, None)],
    'io.k8s.api.core.v1.PodSchedulingGroup': [('pod_group_name', 1, 'string', False, None)],
    'io.k8s.api.core.v1.NodeAllocatableResourceClaimStatus': [
        ('resource_claim_name', 1, 'string', False, None), ('containers', 2, 'string', True, None),
        ('resources', 3, 'btree_map', False, 'message')],
    'io.k8s.api.core.v1.VolumeStatus': [('image', 1, 'message', False, None)],
    'io.k8s.api.core.v1.ImageVolumeStatus': [('image_ref', 1, 'string', False, None)],
    'io.k8s.api.storage.v1.CSIDriverSpec': [('prevent_pod_scheduling_if_missing', 11, 'bool', False, None)],
    'io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta': [('shard_info', 5, 'message', False, None)],
    'io.k8s.apimachinery.pkg.apis.meta.v1.ShardInfo': [('selector', 1, 'string', False, None)],
}
for _v, _holder, _tag in (('v1', 'Device', 13), ('v1beta1', 'BasicDevice', 12), ('v1beta2', 'Device', 13)):
    V136[f'io.k8s.api.resource.{_v}.{_holder}'] = [
        ('node_allocatable_resource_mappings', _tag, 'btree_map', False, 'message')]
    V136[f'io.k8s.api.resource.{_v}.DeviceAttribute'] = [
        ('ints', 6, 'int64', True, None), ('bools', 7, 'bool', True, None),
        ('strings', 8, 'string', True, None), ('versions', 9, 'string', True, None)]
    V136[f'io.k8s.api.resource.{_v}.NodeAllocatableResourceMapping'] = [
        ('capacity_key', 1, 'string', False, None), ('allocation_multiplier', 2, 'message', False, None)]
for _def, _fields in V136.items():
    _prefix, _name = _def.rsplit('.', 1)
    _key = _def.lower()
    if _key not in pb:
        _parts = _prefix.replace('io.k8s.', '').split('.')
        pb[_key] = (_parts, _name, [])
    for _n, _tag, _kind, _rep, _map in _fields:
        # proto2: repeated scalars are not packed.
        pb[_key][2].append({'name': _n, 'tag': _tag, 'kind': _kind, 'repeated': _rep, 'map': _map,
                            'ty': '', 'packed': not (_rep and _kind in ('int64', 'bool'))})


def resolve(parts, ty):
    """The spec-style name of the message a prost type path names, from module `parts`."""
    if not ty:
        return None  # a v1.36 addition: its message comes from the spec's $ref
    inner = re.findall(r'<([^<>]*)>', ty)
    t = [x for x in inner[-1].split(',') if x][-1] if inner else ty
    segs = t.split('::')
    mod = list(parts)
    rest = []
    for s in segs:
        if s == 'super':
            mod.pop()
        elif s:
            rest.append(s)
    if len(rest) > 1:
        mod = mod + rest[:-1] if ty.count('super') else rest[:-1]
    key = (module_prefix(mod) + '.' + rest[-1]).lower() if module_prefix(mod) else None
    return key if key in pb else None


def pb_for_def(name):
    return pb.get(name.lower())


# --- the table ---
order = []      # message keys, in index order
index = {}      # key -> index
entries = {}    # key -> (name, wrap, fields)
gaps = []       # (definition, property): in the spec, not in k8s-pb
extra = []      # (message, field): in k8s-pb, not in the spec (and not inline)


def msg_index(key):
    if key not in index:
        index[key] = len(order)
        order.append(key)
    return index[key]


def ref_of(s):
    r = s.get('$ref') if isinstance(s, dict) else None
    return r.split('/')[-1] if r else None


SCALAR = {'string': 'Str', 'int32': 'I32', 'int64': 'I64', 'bool': 'Bool', 'double': 'F64', 'bytes': 'Bytes'}


def value_ty(schema, pf, parts):
    """The Rust Ty for one value (not the repetition) of a property."""
    r = ref_of(schema)
    if r in SPECIAL:
        return SPECIAL[r]
    if r in SCHEMA_OR:
        return f'{SCHEMA_OR[r]}({msg_index(SCHEMA_PROPS.lower())})'
    if r:
        if pb_for_def(r) is None:
            return None
        return f'Msg({msg_index(r.lower())})'
    if pf['kind'] == 'message':
        # A message wrapping a list (ExtraValue, ...): JSON holds the list itself.
        target = resolve(parts, pf['ty'])
        if target is None:
            return None
        return f'Wrapped({msg_index(target)})'
    return SCALAR.get(pf['kind'] if not pf['map'] else pf['map'])


def inline_names(key, top):
    """Normalized JSON names of `top` an inline message holds (through its own inline ones)."""
    parts, _, pfields = pb[key]
    names = set()
    for pf in pfields:
        t = resolve(parts, pf['ty']) if pf['kind'] == 'message' and not pf['repeated'] else None
        if norm(pf['name']) in top:
            names.add(norm(pf['name']))
        elif t:
            names |= inline_names(t, top)
    return names


def build(key, props, required, wrap=False, has_gvk=False):
    parts, pname, pfields = pb[key]
    byname = {norm(pf['name']): pf for pf in pfields}
    top = {norm(k) for k in props}
    inlined = set()
    for pf in pfields:
        t = resolve(parts, pf['ty']) if pf['kind'] == 'message' and not pf['repeated'] else None
        if t and norm(pf['name']) not in top:
            inlined |= inline_names(t, top)
    used = set()
    out = []
    for jname, p in sorted(props.items()):
        pf = byname.get(norm(jname))
        if pf is None:
            if has_gvk and jname in ('apiVersion', 'kind'):
                continue  # TypeMeta: carried by the runtime.Unknown envelope
            if norm(jname) not in inlined:
                gaps.append((key, jname))
            continue
        used.add(pf['name'])
        rep = 'false'
        if pf['map']:
            vt = value_ty(p.get('additionalProperties', {}), dict(pf, kind=pf['map']), parts)
            if pf['map'] == 'message' and vt and vt in SCALAR.values():
                vt = None
            ty = f'Map(&Ty::{vt})' if vt else None
        elif p.get('type') == 'array' and not pf['repeated'] and pf['kind'] == 'message':
            # A list carried in one wrapper message (APIResource's verbs).
            target = resolve(parts, pf['ty'])
            ty = f'Wrapped({msg_index(target)})' if target else None
        elif p.get('type') == 'array' or pf['repeated']:
            items = p.get('items', {})
            if items.get('type') == 'array':
                ty = value_ty({}, pf, parts)  # [][]T: repeated wrapper messages
            else:
                ty = value_ty(items, pf, parts)
            rep = 'true' if pf['packed'] or pf['kind'] in ('string', 'bytes', 'message') else 'Unpacked'
        else:
            ty = value_ty(p, pf, parts)
        if ty is None:
            gaps.append((key, jname + ' (shape)'))
            continue
        desc = p.get('description', '')
        numeric = ty in ('I32', 'I64', 'Bool', 'F64')
        keep = jname in required or jname in KEEP_ZERO or (numeric and bool(ZERO_MEANING.search(desc)))
        out.append((pf['tag'], jname, ty, rep, keep))
    for pf in pfields:
        if pf['name'] in used:
            continue
        target = resolve(parts, pf['ty']) if pf['kind'] == 'message' else None
        if target and not pf['repeated']:
            # Go's `json:",inline"` embedding: the message's fields sit in this object.
            build_inline(target, props, required)
            out.append((pf['tag'], pf['name'], f'Inline({msg_index(target)})', 'false', False))
        else:
            extra.append((key, pf['name']))
    entries[key] = (pname, wrap, sorted(out))


def build_inline(target, props, required):
    if target in entries:
        return
    names = inline_names(target, {norm(k) for k in props})
    sub = {k: v for k, v in props.items() if norm(k) in names}
    build(target, sub, required)


# Every definition with properties and a message, plus everything they reach.
for name in sorted(defs):
    d = defs[name]
    if name in SPECIAL or name in SCHEMA_OR or not d.get('properties'):
        continue
    if pb_for_def(name) is None:
        continue
    msg_index(name.lower())
i = 0
def_by_key = {n.lower(): n for n in defs}
while i < len(order):
    key = order[i]
    i += 1
    if key in entries:
        continue
    dname = def_by_key.get(key)
    if dname is not None:
        d = defs[dname]
        build(key, d.get('properties', {}), set(d.get('required', [])), has_gvk=bool(d.get('x-kubernetes-group-version-kind')))
    else:
        # A message with no definition (ExtraValue-like wrappers): its single repeated field.
        parts, pname, pfields = pb[key]
        out = []
        for pf in pfields:
            ty = SCALAR.get(pf['kind'])
            if pf['kind'] == 'message':
                t = resolve(parts, pf['ty'])
                ty = f'Msg({msg_index(t)})' if t else None
            if ty:
                out.append((pf['tag'], pf['name'], ty, 'true' if pf['repeated'] else 'false', False))
        entries[key] = (pname, True, out)

# The GVKs that name a message.
kinds = []
for name, d in defs.items():
    if name.lower() not in entries:
        continue
    for g in d.get('x-kubernetes-group-version-kind', []):
        kinds.append((g['group'], g['version'], g['kind'], index[name.lower()]))
kinds.sort()

sha = hashlib.sha256(raw).hexdigest()
lines = [
    '//! Protobuf facts of upstream\'s v1.36 built-in types: for each message, its fields\' JSON',
    '//! names, numbers and wire types. Generated by hack/gen-protobuf-facts.py from the spec',
    f'//! with sha256 {sha}, the k8s-pb 0.9.0 sources and v1.36 additions; do not edit.',
    '',
    'use crate::protobuf::table::{Field, Message, Ty};',
    '',
    'const fn m(name: &\'static str, wrap: bool, fields: &\'static [Field]) -> Message {',
    '    Message { name, wrap, fields }',
    '}',
    '',
    'const fn f(json: &\'static str, tag: u32, ty: Ty, repeated: bool, packed: bool, keep_zero: bool) -> Field {',
    '    Field { json, tag, ty, repeated, packed, keep_zero }',
    '}',
    '',
    '/// Every message, in index order (`Ty::Msg` and friends hold indexes).',
    '#[rustfmt::skip]',
    'pub static MESSAGES: &[Message] = &[',
]
for n, key in enumerate(order):
    pname, wrap, fields = entries[key]
    full = def_by_key.get(key, key)
    lines.append(f'    // {n}')
    lines.append(f'    m("{full}", {str(wrap).lower()}, &[')
    for tag, jname, ty, rep, keep in fields:
        repeated = 'false' if rep == 'false' else 'true'
        packed = 'false' if rep == 'Unpacked' else 'true'
        lines.append(f'        f("{jname}", {tag}, Ty::{ty}, {repeated}, {packed}, {str(keep).lower()}),')
    lines.append('    ]),')
lines.append('];')
lines.append('')
lines.append('/// (group, version, kind) → message index, sorted (binary-searched).')
lines.append('#[rustfmt::skip]')
lines.append('pub static KINDS: &[(&str, &str, &str, u16)] = &[')
for g, v, k, i in kinds:
    lines.append(f'    ("{g}", "{v}", "{k}", {i}),')
lines.append('];')
lines.append('')
lines.append('/// Properties of the v1.36 spec that k8s-pb 0.9.0 has no field for (not transcoded).')
lines.append('#[rustfmt::skip]')
lines.append('pub static GAPS: &[(&str, &str)] = &[')
for key, f in sorted(set(gaps)):
    lines.append(f'    ("{def_by_key.get(key, key)}", "{f}"),')
lines.append('];')
open(OUT, 'w').write('\n'.join(lines) + '\n')
print(f'{len(order)} messages, {len(kinds)} kinds, {len(set(gaps))} gaps, {len(extra)} unmatched prost fields',
      file=sys.stderr)
for key, f in sorted(set(gaps)):
    print('gap:', def_by_key.get(key, key), f, file=sys.stderr)
for key, f in extra:
    print('extra:', def_by_key.get(key, key), f, file=sys.stderr)

use serde_json::{Value, json};

use super::*;

fn round_trip(v: &Value) -> Value {
    let bytes = encode(v).unwrap();
    assert!(bytes.starts_with(MAGIC));
    decode(&bytes).unwrap()
}

fn pod() -> Value {
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "5f1c2a4e-0000-4000-8000-000000000001",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"app": "web", "tier": ""},
            "annotations": {"note": "a\nb"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": true}],
            "finalizers": ["a/b", "c/d"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
        },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "nginx:1",
                "command": ["sh", "-c", "echo hi"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "1"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 5},
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}
            }],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420, "items": [{"key": "a", "path": "a.txt"}]}}
            ],
            "nodeSelector": {"disk": "ssd"},
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Always",
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
            ]}}}
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-01-02T03:04:06Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:07Z"}],
            "podIP": "10.0.0.5",
            "podIPs": [{"ip": "10.0.0.5"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2, "image": "nginx:1", "imageID": "",
                "state": {"running": {"startedAt": "2026-01-02T03:04:08Z"}}}]
        }
    })
}

#[test]
fn a_pod_with_every_special_type_round_trips() {
    let mut input = pod();
    // hostNetwork false is not a pointer in Go: omitempty drops it, as decoding does;
    // imageID "" is required (no omitempty) and stays.
    input["spec"]["hostNetwork"] = json!(false);
    assert_eq!(round_trip(&input), pod());
}

#[test]
fn secrets_lists_raw_extensions_micro_times_and_zero_pointers_round_trip() {
    let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "type": "Opaque",
        "data": {"k": "AAEC/w==", "empty": ""}, "immutable": true});
    assert_eq!(round_trip(&secret), secret);
    let deployment = json!({"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "d"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    assert_eq!(round_trip(&deployment), deployment);
    let revision = json!({"kind": "ControllerRevision", "apiVersion": "apps/v1", "metadata": {"name": "r"},
        "revision": 7, "data": {"spec": {"template": {"x": [1, "y", null]}}}});
    assert_eq!(round_trip(&revision), revision);
    let lease = json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"name": "l"},
        "spec": {"holderIdentity": "me", "renewTime": "2026-01-02T03:04:05.123456Z", "leaseDurationSeconds": 15}});
    assert_eq!(round_trip(&lease), lease);
    let list = json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "9", "continue": "c"},
        "items": [{"metadata": {"name": "a"}, "data": {"x": "y"}}, {"metadata": {"name": "b"}, "binaryData": {"b": "AQI="}}]});
    assert_eq!(round_trip(&list), list);
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound", "details": {"name": "x", "kind": "pods"}, "code": 404});
    assert_eq!(round_trip(&status), status);
    let crd = json!({"kind": "CustomResourceDefinition", "apiVersion": "apiextensions.k8s.io/v1", "metadata": {"name": "ws.x.io"},
        "spec": {"group": "x.io", "scope": "Namespaced", "names": {"plural": "ws", "kind": "W"}, "versions": [{"name": "v1",
            "served": true, "storage": true, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"a": {"type": "array", "items": {"type": "string"}, "default": ["q"]},
                    "m": {"type": "object", "additionalProperties": false}, "n": {"type": "number", "maximum": 2.5}}}}}]}});
    assert_eq!(round_trip(&crd), crd);
}

#[test]
fn decoding_drops_go_zero_values_of_omitempty_fields_only() {
    // What a Go client writes for an unset ObjectMeta and container fields: every
    // non-pointer field, zero or not.
    let mut meta = wire::Writer::default();
    meta.bytes_field(1, b"cm"); // name
    meta.bytes_field(2, b""); // generateName
    meta.varint_field(7, 0); // generation
    meta.bytes_field(8, b""); // creationTimestamp: a zero Time is an empty message
    let mut raw = wire::Writer::default();
    raw.bytes_field(1, &meta.buf);
    let mut entry = wire::Writer::default();
    entry.bytes_field(1, b"a");
    entry.bytes_field(2, b"");
    raw.bytes_field(2, &entry.buf); // data {"a": ""}: map values stay
    raw.varint_field(4, 0); // immutable: false (a pointer in Go, but false means the same)
    let obj = decode(&envelope("v1", "ConfigMap", &raw.buf)).unwrap();
    assert_eq!(obj, json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "cm"}, "data": {"a": ""}}));
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = wire::Writer::default();
    tm.bytes_field(1, api_version.as_bytes());
    tm.bytes_field(2, kind.as_bytes());
    let mut w = wire::Writer { buf: MAGIC.to_vec() };
    w.bytes_field(1, &tm.buf);
    w.bytes_field(2, raw);
    w.buf
}

#[test]
fn bytes_written_by_the_k8s_pb_prost_types_decode() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use prost::Message as _;
    let pod = core::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            labels: [("app".to_string(), "x".to_string())].into(),
            creation_timestamp: Some(meta::Time { seconds: Some(1_767_323_045), nanos: Some(999) }),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                image: Some("busybox".into()),
                args: vec!["sleep".into(), "1".into()],
                resources: Some(core::ResourceRequirements {
                    limits: [("cpu".to_string(), Quantity { string: Some("250m".into()) })].into(),
                    ..Default::default()
                }),
                liveness_probe: Some(core::Probe {
                    handler: Some(core::ProbeHandler {
                        http_get: Some(core::HttpGetAction {
                            port: Some(IntOrString { r#type: Some(1), int_val: Some(0), str_val: Some("web".into()) }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    period_seconds: Some(3),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: vec![core::Volume {
                name: Some("v".into()),
                volume_source: Some(core::VolumeSource {
                    secret: Some(core::SecretVolumeSource { secret_name: Some("s".into()), ..Default::default() }),
                    ..Default::default()
                }),
            }],
            termination_grace_period_seconds: Some(0),
            host_network: Some(false),
            ..Default::default()
        }),
        status: None,
    };
    let got = decode(&envelope("v1", "Pod", &pod.encode_to_vec())).unwrap();
    assert_eq!(
        got,
        json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}, "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "args": ["sleep", "1"],
                "resources": {"limits": {"cpu": "250m"}},
                "livenessProbe": {"httpGet": {"port": "web"}, "periodSeconds": 3}}],
                "volumes": [{"name": "v", "secret": {"secretName": "s"}}],
                "terminationGracePeriodSeconds": 0}})
    );
    // And the other way: what we write, prost reads.
    let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"k": "aGk="}});
    let bytes = encode(&secret).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    assert_eq!(unknown.type_meta.as_ref().and_then(|t| t.kind.as_deref()), Some("Secret"));
    let s = core::Secret::decode(unknown.raw.as_deref().unwrap()).unwrap();
    assert_eq!(s.data.get("k").map(Vec::as_slice), Some(&b"hi"[..]));
    let frame = watch_frame("ADDED", &secret).unwrap();
    assert_eq!(u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
    let ev = meta::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert_eq!(ev.object.and_then(|o| o.raw).unwrap(), bytes);
    assert_eq!(read_watch_frames(&frame).unwrap(), vec![("ADDED".to_string(), secret)]);
}

#[test]
fn repeated_numbers_decode_packed_and_unpacked() {
    // PodSecurityContext.supplementalGroups (int64, 4): unpacked as Go writes, and packed.
    let mut unpacked = wire::Writer::default();
    unpacked.varint_field(4, 1);
    unpacked.varint_field(4, 2);
    let mut packed = wire::Writer::default();
    packed.bytes_field(4, &[3, 4]);
    for (raw, want) in [(unpacked.buf, json!([1, 2])), (packed.buf, json!([3, 4]))] {
        let mut spec = wire::Writer::default();
        spec.bytes_field(14, &raw); // PodSpec.securityContext
        let mut pod = wire::Writer::default();
        pod.bytes_field(2, &spec.buf);
        let v = decode(&envelope("v1", "Pod", &pod.buf)).unwrap();
        assert_eq!(v["spec"]["securityContext"]["supplementalGroups"], want);
    }
}

#[test]
fn malformed_input_is_an_error_never_a_panic() {
    let good = encode(&pod()).unwrap();
    assert!(decode(b"{}").is_err());
    assert!(decode(&envelope("v1", "Nope", b"")).is_err());
    assert!(decode(&envelope("v1", "Pod", &[0x12, 0x7f, 0x01])).is_err());
    // Every truncation and many single-byte corruptions: errors or values, no panics.
    for n in 0..good.len() {
        let _ = decode(&good[..n]);
    }
    for i in 0..good.len() {
        for b in [0x00, 0x07, 0x80, 0xff] {
            let mut bad = good.clone();
            bad[i] = b;
            let _ = decode(&bad);
        }
    }
    // Deep nesting is refused.
    let mut schema = Vec::new();
    for _ in 0..200 {
        let mut w = wire::Writer::default();
        w.bytes_field(28, &schema); // JSONSchemaProps.not
        schema = w.buf;
    }
    let mut v = wire::Writer::default();
    v.bytes_field(1, &schema);
    let mut s = wire::Writer::default();
    s.bytes_field(2, &v.buf);
    let _ = decode(&envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", &s.buf));
}

#[test]
fn go_durations() {
    for (n, s) in
        [(0, "0s"), (1_500, "1.5µs"), (2_000_000, "2ms"), (90_000_000_000, "1m30s"), (3_600_000_000_000, "1h0m0s")]
    {
        assert_eq!(transcode::format_go_duration(n), s);
        assert_eq!(transcode::parse_go_duration(s).unwrap(), n);
    }
    assert!(transcode::parse_go_duration("5x").is_err());
}

#[test]
fn kinds_without_a_message_are_not_supported() {
    assert!(supports("", "v1", "Pod"));
    assert!(supports("apps", "v1", "DeploymentList"));
    assert!(supports("", "v1", "Status"));
    assert!(!supports("example.com", "v1", "Widget"));
    assert!(encode(&json!({"kind": "Widget", "apiVersion": "example.com/v1"})).is_err());
}

#[test]
fn fields_new_in_v1_36_round_trip_with_upstream_numbers() {
    let mut p = pod();
    p["spec"]["schedulingGroup"] = json!({"podGroupName": "training"});
    p["status"]["nodeAllocatableResourceClaimStatuses"] =
        json!([{"resourceClaimName": "gpu", "containers": ["app"], "resources": {"cpu": "2"}}]);
    let bytes = encode(&p).unwrap();
    // PodSpec.schedulingGroup is field 43, length-delimited: key varint 0xDA 0x02.
    assert!(bytes.windows(2).any(|w| w == [0xDA, 0x02]));
    assert_eq!(decode(&bytes).unwrap(), p);
    let slice = json!({"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": "s"},
        "spec": {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n",
            "devices": [{"name": "dev", "attributes": {"sizes": {"ints": [1, 2]}, "flags": {"bools": [true, false]}},
                "nodeAllocatableResourceMappings": {"cpu": {"capacityKey": "cores", "allocationMultiplier": "2"}}}]}});
    assert_eq!(round_trip(&slice), slice);
}

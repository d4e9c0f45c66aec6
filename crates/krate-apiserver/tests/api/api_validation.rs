//! Defaulting, validation and immutability of the built-in kinds, over HTTPS with
//! kube-rs: invalid objects are 422s with upstream's causes (field paths and
//! messages), valid ones come back with upstream's defaults.

use crate::common::TestServer;
use kube::core::Status;
use serde_json::{Value, json};

/// A request with a JSON body; the response body, or the Status the server failed with.
async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> Result<Value, Status> {
    let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match client.request::<Value>(req).await {
        Ok(v) => Ok(v),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(other) => panic!("{method} {path}: {other:?}"),
    }
}

async fn create(client: &kube::Client, path: &str, body: Value) -> Value {
    match send(client, "POST", path, body).await {
        Ok(v) => v,
        Err(s) => panic!("POST {path} failed: {} {}", s.code, s.message),
    }
}

async fn rejected(client: &kube::Client, method: &str, path: &str, body: Value) -> Status {
    match send(client, method, path, body).await {
        Ok(v) => panic!("{method} {path} was accepted: {v}"),
        Err(s) => s,
    }
}

/// The causes of an Invalid error, as "field: message".
fn causes(s: &Status) -> Vec<String> {
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{}", s.message);
    s.details.as_ref().expect("details").causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
}

fn assert_has(causes: &[String], want: &str) {
    assert!(causes.iter().any(|c| c == want), "missing cause {want:?}\nin {causes:#?}");
}

const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}})
}

#[tokio::test]
async fn pods_are_defaulted_and_get_a_qos_class() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    let pod = create(
        &client,
        PODS,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["securityContext"], json!({}));
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(spec["serviceAccount"], "default");
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    let c = &spec["containers"][0];
    assert_eq!(c["imagePullPolicy"], "Always", "no tag means latest");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(pod["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));

    let guaranteed = create(
        &client,
        PODS,
        // No token volume: the merge patch below replaces the container list whole.
        json!({"metadata": {"name": "g"}, "spec": {"automountServiceAccountToken": false, "containers": [{
        "name": "c", "image": "busybox:1.36", "ports": [{"containerPort": 8080}],
        "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"}}}]}}),
    )
    .await;
    let c = &guaranteed["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(c["resources"]["limits"], json!({"cpu": "1", "memory": "1Gi"}), "quantities are canonical");
    assert_eq!(c["resources"]["requests"], json!({"cpu": "1", "memory": "1Gi"}), "requests default to limits");
    assert_eq!(guaranteed["status"]["qosClass"], "Guaranteed");

    let burstable = create(
        &client,
        PODS,
        json!({"metadata": {"name": "b"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}),
    )
    .await;
    assert_eq!(burstable["status"]["qosClass"], "Burstable");

    // The pod-update rule still holds with defaults applied to the update body.
    let image = json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.37", "ports": [{"containerPort": 8080}],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
    let updated = send(&client, "PATCH", &format!("{PODS}/g"), image).await.unwrap();
    assert_eq!(updated["spec"]["containers"][0]["image"], "busybox:1.37");

    // Ephemeral containers added through their subresource are validated too.
    let debug = json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox", "targetContainerName": "nope"}]}});
    let s = rejected(&client, "PATCH", &format!("{PODS}/p/ephemeralcontainers"), debug).await;
    assert_eq!(causes(&s), vec!["spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\""]);
}

#[tokio::test]
async fn invalid_pods_are_422s_with_upstream_causes() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    let s = rejected(&client, "POST", PODS, json!({"metadata": {"name": "empty"}, "spec": {}})).await;
    assert_eq!(causes(&s), vec!["spec.containers: Required value"]);
    assert_eq!(s.message, "Pod \"empty\" is invalid: spec.containers: Required value");

    let s = rejected(&client, "POST", PODS, json!({"metadata": {"name": "bad"}, "spec": {
        "restartPolicy": "Sometimes",
        "volumes": [{"name": "data"}, {"name": "data"}],
        "containers": [
            {"name": "Web_1", "image": "nginx", "ports": [{"containerPort": 0}, {"containerPort": 70000, "protocol": "ICMP"}],
             "volumeMounts": [{"name": "nope", "mountPath": "/x"}],
             "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "1"}}},
            {"name": "sidecar"},
            {"name": "sidecar", "image": "x", "env": [{"name": "A=B"}]}]}})).await;
    let c = causes(&s);
    for want in [
        "spec.volumes[1].name: Duplicate value: \"data\"",
        "spec.containers[0].name: Invalid value: \"Web_1\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        "spec.containers[0].ports[0].containerPort: Required value",
        "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        "spec.containers[0].volumeMounts[0].name: Not found: \"nope\"",
        "spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit of 500m",
        "spec.containers[1].image: Required value",
        "spec.containers[2].name: Duplicate value: \"sidecar\"",
        "spec.containers[2].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
    ] {
        assert_has(&c, want);
    }
    let reasons: Vec<&str> = s.details.as_ref().unwrap().causes.iter().map(|c| c.reason.as_str()).collect();
    assert!(reasons.contains(&"FieldValueNotFound") && reasons.contains(&"FieldValueDuplicate"), "{reasons:?}");
}

#[tokio::test]
async fn deployments_come_back_with_upstream_defaults() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let body = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}});
    let d = create(&client, DEPLOYMENTS, body.clone()).await;
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let ps = &spec["template"]["spec"];
    assert_eq!(ps["restartPolicy"], "Always");
    assert_eq!(ps["dnsPolicy"], "ClusterFirst");
    assert_eq!(ps["schedulerName"], "default-scheduler");
    assert_eq!(ps["terminationGracePeriodSeconds"], 30);
    assert_eq!(ps["securityContext"], json!({}));
    assert!(ps.get("enableServiceLinks").is_none(), "pod-only defaults stay off templates");
    assert!(ps.get("serviceAccountName").is_none(), "templates get no service account");
    assert_eq!(ps["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(ps["containers"][0]["terminationMessagePolicy"], "File");
    assert_eq!(d["metadata"]["generation"], 1);

    // A replace with the same minimal body is defaulted the same way: no spec change.
    let mut again = body.clone();
    again["metadata"]["resourceVersion"] = d["metadata"]["resourceVersion"].clone();
    let replaced = send(&client, "PUT", &format!("{DEPLOYMENTS}/web"), again).await.unwrap();
    assert_eq!(replaced["spec"], d["spec"]);
    assert_eq!(replaced["metadata"]["generation"], 1);

    // Annotations bump a Deployment's generation too.
    let annotated =
        send(&client, "PATCH", &format!("{DEPLOYMENTS}/web"), json!({"metadata": {"annotations": {"a": "b"}}}))
            .await
            .unwrap();
    assert_eq!(annotated["metadata"]["generation"], 2);
}

#[tokio::test]
async fn deployment_selectors_must_match_and_never_change() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    let s = rejected(
        &client,
        "POST",
        DEPLOYMENTS,
        json!({"metadata": {"name": "nosel"}, "spec": {"template": template()}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec![
            "spec.selector: Required value",
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
        ]
    );
    let s = rejected(
        &client,
        "POST",
        DEPLOYMENTS,
        json!({"metadata": {"name": "mismatch"}, "spec": {
        "selector": {"matchLabels": {"app": "db"}}, "template": template(), "replicas": -1,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}}),
    )
    .await;
    let c = causes(&s);
    assert_has(&c, "spec.replicas: Invalid value: -1: must be greater than or equal to 0");
    assert_has(
        &c,
        "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
    );
    assert_has(
        &c,
        "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
    );
    let mut never = template();
    never["spec"]["restartPolicy"] = json!("Never");
    let s = rejected(
        &client,
        "POST",
        DEPLOYMENTS,
        json!({"metadata": {"name": "never"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}}, "template": never}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec!["spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""]
    );

    create(&client, DEPLOYMENTS, json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}})).await;
    let s = rejected(
        &client,
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        json!({"spec": {
        "selector": {"matchLabels": {"app": "web", "tier": "front"}},
        "template": {"metadata": {"labels": {"tier": "front"}}}}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec![
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"tier\":\"front\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
        ]
    );
    // Scaling and template changes are fine.
    let ok = send(
        &client,
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        json!({"spec": {"replicas": 3,
        "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}}),
    )
    .await
    .unwrap();
    assert_eq!(ok["spec"]["replicas"], 3);
    assert_eq!(ok["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
}

#[tokio::test]
async fn stateful_sets_daemon_sets_and_replica_sets() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let sts_path = "/apis/apps/v1/namespaces/default/statefulsets";
    let sts = create(&client, sts_path, json!({"metadata": {"name": "db"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}}, "serviceName": "db", "template": template(),
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}})).await;
    let spec = &sts["spec"];
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(spec["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
    assert_eq!(spec["persistentVolumeClaimRetentionPolicy"], json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["volumeClaimTemplates"][0]["spec"]["volumeMode"], "Filesystem");
    let s = rejected(&client, "PATCH", &format!("{sts_path}/db"), json!({"spec": {"serviceName": "other"}})).await;
    assert_eq!(
        causes(&s),
        vec![
            "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
        ]
    );
    send(&client, "PATCH", &format!("{sts_path}/db"), json!({"spec": {"replicas": 3}})).await.unwrap();
    let s = rejected(
        &client,
        "POST",
        sts_path,
        json!({"metadata": {"name": "web.v1"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}}, "template": template()}}),
    )
    .await;
    // Upstream's IsDNS1123Label: a valid subdomain that is not a label "must not contain dots".
    assert_eq!(causes(&s), vec!["metadata.name: Invalid value: \"web.v1\": must not contain dots"]);

    let ds_path = "/apis/apps/v1/namespaces/default/daemonsets";
    let ds = create(&client, ds_path, json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}})).await;
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    let s = rejected(
        &client,
        "PATCH",
        &format!("{ds_path}/agent"),
        json!({"spec": {"selector": {"matchLabels": {"app": "agent"}}}}),
    )
    .await;
    assert_has(
        &causes(&s),
        "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"agent\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
    );

    let rs_path = "/apis/apps/v1/namespaces/default/replicasets";
    let s = rejected(
        &client,
        "POST",
        rs_path,
        json!({"metadata": {"name": "rs"}, "spec": {"selector": {}, "template": template()}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec![
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"
        ]
    );
    let rs = create(&client, rs_path, json!({"metadata": {"name": "rs"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}})).await;
    assert_eq!(rs["spec"]["replicas"], 1);
}

#[tokio::test]
async fn jobs_get_a_generated_selector_and_keep_their_template() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let mut t = template();
    t["spec"]["restartPolicy"] = json!("Never");
    let job = create(&client, JOBS, json!({"metadata": {"name": "pi"}, "spec": {"template": t}})).await;
    let uid = job["metadata"]["uid"].as_str().unwrap().to_string();
    let spec = &job["spec"];
    assert_eq!(spec["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
    assert_eq!(
        spec["template"]["metadata"]["labels"],
        json!({"app": "web", "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi", "controller-uid": uid, "job-name": "pi"})
    );
    assert_eq!(job["metadata"]["labels"], json!({"app": "web"}), "a Job's labels default to its template's");
    for (field, value) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("manualSelector", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        assert_eq!(spec[field], value, "{field}");
    }

    let s = rejected(
        &client,
        "PATCH",
        &format!("{JOBS}/pi"),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"]);
    // A generateName Job: the name is generated before defaulting, so pods carry it.
    let mut t2 = template();
    t2["spec"]["restartPolicy"] = json!("OnFailure");
    let generated =
        create(&client, JOBS, json!({"metadata": {"generateName": "batch-"}, "spec": {"template": t2}})).await;
    let guid = generated["metadata"]["uid"].as_str().unwrap();
    assert!(generated["metadata"]["name"].as_str().unwrap().starts_with("batch-"));
    assert_eq!(generated["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], guid);
    assert_eq!(generated["spec"]["template"]["metadata"]["labels"]["controller-uid"], guid);
    assert_eq!(
        generated["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"],
        generated["metadata"]["name"]
    );

    let s = rejected(&client, "PATCH", &format!("{JOBS}/pi"), json!({"spec": {"completions": 5}})).await;
    assert_eq!(causes(&s), vec!["spec.completions: Invalid value: 5: field is immutable"]);
    let s =
        rejected(&client, "PATCH", &format!("{JOBS}/pi"), json!({"spec": {"selector": {"matchLabels": {"x": "y"}}}}))
            .await;
    let selector = format!(
        "v1.LabelSelector{{MatchLabels:map[string]string{{\"batch.kubernetes.io/controller-uid\":\"{uid}\", \"x\":\"y\"}}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}}"
    );
    let c = causes(&s);
    assert_has(&c, &format!("spec.selector: Invalid value: {selector}: `selector` not auto-generated"));
    assert_has(&c, &format!("spec.selector: Invalid value: {selector}: field is immutable"));
}

#[tokio::test]
async fn invalid_jobs_and_cron_jobs() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let s = rejected(&client, "POST", JOBS, json!({"metadata": {"name": "always"}, "spec": {"template": template()}}))
        .await;
    assert_eq!(
        causes(&s),
        vec!["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]
    );
    let mut t = template();
    t["spec"]["restartPolicy"] = json!("OnFailure");
    let s = rejected(
        &client,
        "POST",
        JOBS,
        json!({"metadata": {"name": "indexed"}, "spec": {
        "completionMode": "Indexed", "parallelism": 2, "template": t}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["spec.completions: Required value: when completion mode is Indexed"]);
    let s = rejected(
        &client,
        "POST",
        JOBS,
        json!({"metadata": {"name": "perindex"}, "spec": {"backoffLimitPerIndex": 1, "template": t}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"]);

    let cron_path = "/apis/batch/v1/namespaces/default/cronjobs";
    let cj = create(
        &client,
        cron_path,
        json!({"metadata": {"name": "nightly"}, "spec": {"schedule": "0 3 * * *", "timeZone": "Europe/Paris",
        "jobTemplate": {"spec": {"template": t}}}}),
    )
    .await;
    let spec = &cj["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Allow");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["successfulJobsHistoryLimit"], 3);
    assert_eq!(spec["failedJobsHistoryLimit"], 1);
    assert_eq!(spec["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    let s = rejected(&client, "POST", cron_path, json!({"metadata": {"name": "x".repeat(53)}, "spec": {
        "schedule": "61 * * * *", "timeZone": "Mars/Olympus", "concurrencyPolicy": "Sometimes", "startingDeadlineSeconds": -1,
        "jobTemplate": {"spec": {"template": t}}}})).await;
    let c = causes(&s);
    for want in [
        "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61",
        "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
        "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus",
        "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
        &format!("metadata.name: Invalid value: \"{}\": must be no more than 52 characters", "x".repeat(53)),
    ] {
        assert_has(&c, want);
    }
    let s = rejected(
        &client,
        "POST",
        cron_path,
        json!({"metadata": {"name": "nosched"}, "spec": {"jobTemplate": {"spec": {"template": t}}}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["spec.schedule: Required value"]);
    let s = rejected(&client, "POST", cron_path, json!({"metadata": {"name": "fields"}, "spec": {"schedule": "* * * *", "jobTemplate": {"spec": {"template": t}}}})).await;
    assert_eq!(
        causes(&s),
        vec!["spec.schedule: Invalid value: \"* * * *\": expected exactly 5 fields, found 4: [* * * *]"]
    );
}

#[tokio::test]
async fn config_maps_and_secrets() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let s = rejected(
        &client,
        "POST",
        cms,
        json!({"metadata": {"name": "bad"}, "data": {"bad key": "v", "both": "x"}, "binaryData": {"both": "AA=="}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec![
            "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "data[both]: Invalid value: \"both\": duplicate of key present in binaryData",
        ]
    );
    let s = rejected(
        &client,
        "POST",
        cms,
        json!({"metadata": {"name": "big"}, "data": {"a": "x".repeat(1024 * 1024 + 1)}}),
    )
    .await;
    assert_eq!(causes(&s), vec![": Too long: may not be more than 1048576 bytes"]);

    let secrets = "/api/v1/namespaces/default/secrets";
    let secret = create(
        &client,
        secrets,
        json!({"metadata": {"name": "creds"}, "stringData": {"password": "hunter2"}, "immutable": true}),
    )
    .await;
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"], json!({"password": "aHVudGVyMg=="}), "stringData is folded into data");
    assert!(secret.get("stringData").is_none());
    let s = rejected(&client, "PATCH", &format!("{secrets}/creds"), json!({"data": {"password": "eA=="}})).await;
    assert_eq!(causes(&s), vec!["data: Forbidden: field is immutable when `immutable` is set"]);
    // Data that is not base64 fails decoding, as upstream's decoder does: 400, not 422.
    let s =
        rejected(&client, "POST", secrets, json!({"metadata": {"name": "bad64"}, "data": {"x": "not base64"}})).await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{}", s.message);
    assert!(s.message.starts_with("Secret in version \"v1\" cannot be handled as a Secret"), "{}", s.message);
    let s = rejected(
        &client,
        "POST",
        secrets,
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "AA=="}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["data[tls.key]: Required value"]);
    let s = rejected(
        &client,
        "POST",
        secrets,
        json!({"metadata": {"name": "sa"}, "type": "kubernetes.io/service-account-token"}),
    )
    .await;
    assert_eq!(causes(&s), vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]);
}

#[tokio::test]
async fn networking_policy_rbac_and_cluster_kinds() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    let np = create(
        &client,
        "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
        json!({"metadata": {"name": "np"},
        "spec": {"egress": [{"ports": [{"port": 53}]}]}}),
    )
    .await;
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
    let s = rejected(&client, "POST", "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", json!({"metadata": {"name": "bad"},
        "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 8080, "endPort": 80}], "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]}]}})).await;
    assert_eq!(
        causes(&s),
        vec![
            "spec.ingress[0].ports[0].endPort: Invalid value: 8080: must be greater than or equal to `port`",
            "spec.ingress[0].from[0].ipBlock.except[0]: Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`",
        ]
    );
    let s = rejected(&client, "POST", "/apis/networking.k8s.io/v1/namespaces/default/ingresses", json!({"metadata": {"name": "ing"},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})).await;
    assert_eq!(causes(&s), vec!["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"]);

    let s = rejected(
        &client,
        "POST",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json!({"metadata": {"name": "pdb"},
        "spec": {"minAvailable": 1, "maxUnavailable": 1}}),
    )
    .await;
    assert_eq!(
        causes(&s),
        vec![
            "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable cannot be both set"
        ]
    );

    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    let s = rejected(
        &client,
        "POST",
        &format!("{rbac}/roles"),
        json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
    )
    .await;
    assert_eq!(causes(&s), vec!["rules[0].verbs: Required value: verbs must contain at least one value"]);
    let rb = create(
        &client,
        &format!("{rbac}/rolebindings"),
        json!({"metadata": {"name": "rb"},
        "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "alice"}]}),
    )
    .await;
    assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    let s = rejected(&client, "PATCH", &format!("{rbac}/rolebindings/rb"), json!({"roleRef": {"kind": "ClusterRole"}}))
        .await;
    assert_eq!(
        causes(&s),
        vec![
            "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"r\"}: cannot change roleRef"
        ]
    );

    let s = rejected(
        &client,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        json!({"metadata": {"name": "huge"}, "value": 2000000000}),
    )
    .await;
    assert_eq!(causes(&s), vec!["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]);
    let pc = create(
        &client,
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        json!({"metadata": {"name": "high"}, "value": 1000}),
    )
    .await;
    assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
    let s = rejected(&client, "PATCH", "/apis/scheduling.k8s.io/v1/priorityclasses/high", json!({"value": 2000})).await;
    assert_eq!(causes(&s), vec!["value: Forbidden: may not be changed in an update."]);

    let s = rejected(
        &client,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]);

    let s = rejected(&client, "POST", "/apis/storage.k8s.io/v1/storageclasses", json!({"metadata": {"name": "fast"}}))
        .await;
    assert_eq!(causes(&s), vec!["provisioner: Required value"]);
    let sc = create(
        &client,
        "/apis/storage.k8s.io/v1/storageclasses",
        json!({"metadata": {"name": "fast"}, "provisioner": "example.com/disk"}),
    )
    .await;
    assert_eq!((sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()), (json!("Delete"), json!("Immediate")));
    let s = rejected(
        &client,
        "PATCH",
        "/apis/storage.k8s.io/v1/storageclasses/fast",
        json!({"parameters": {"type": "ssd"}}),
    )
    .await;
    assert_eq!(causes(&s), vec!["parameters: Forbidden: updates to parameters are forbidden."]);

    let pvcs = "/api/v1/namespaces/default/persistentvolumeclaims";
    let s = rejected(&client, "POST", pvcs, json!({"metadata": {"name": "data"}, "spec": {}})).await;
    assert_eq!(
        causes(&s),
        vec![
            "spec.accessModes: Required value: at least 1 access mode is required",
            "spec.resources[storage]: Required value"
        ]
    );
    let pvc = create(&client, pvcs, json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1024Mi"}}}})).await;
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(pvc["status"]["phase"], "Pending");
}

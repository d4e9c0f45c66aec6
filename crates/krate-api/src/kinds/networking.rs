//! NetworkPolicies and Ingresses (networking.k8s.io/v1).

use serde_json::{Value, json};

use super::{array_of, each_mut, has, obj_mut, set_default_str, str_of};
use crate::error::Cause;
use crate::validation::{
    NameRule, cidr_contains, dns1123_subdomain_errors, invalid_int, invalid_raw, invalid_str, name_errors, parse_cidr,
    port_name_errors, port_num_errors, validate_label_selector,
};

const NULL: Value = Value::Null;
const CIDR_MSG: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

// ---- NetworkPolicy

/// `SetDefaults_NetworkPolicy`: ports are TCP; policyTypes is Ingress, plus Egress
/// when there are egress rules.
pub fn default_network_policy(np: &mut Value) {
    let spec = obj_mut(np, "spec");
    for dir in ["ingress", "egress"] {
        for rule in each_mut(spec, dir) {
            for port in each_mut(rule, "ports") {
                set_default_str(port, "protocol", "TCP");
            }
        }
    }
    if array_of(spec, "policyTypes").is_empty() {
        let mut types = vec![json!("Ingress")];
        if !array_of(spec, "egress").is_empty() {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = json!(types);
    }
    if !has(spec, "podSelector") {
        spec["podSelector"] = json!({});
    }
}

fn validate_port(port: &Value, at: &str, c: &mut Vec<Cause>) {
    if let Some(p) = port.get("protocol").and_then(Value::as_str)
        && !["TCP", "UDP", "SCTP"].contains(&p)
    {
        c.push(Cause::not_supported(format!("{at}.protocol"), p, &["TCP", "UDP", "SCTP"]));
    }
    let end = port.get("endPort").and_then(Value::as_i64);
    match port.get("port").filter(|p| !p.is_null()) {
        Some(Value::String(name)) => {
            if let Some(e) = end {
                c.push(invalid_int(format!("{at}.endPort"), e, "may not be specified when `port` is non-numeric"));
            }
            for msg in port_name_errors(name) {
                c.push(invalid_str(format!("{at}.port"), name, msg));
            }
        }
        Some(p) => {
            let n = p.as_i64().unwrap_or(0);
            for msg in port_num_errors(n) {
                c.push(invalid_int(format!("{at}.port"), n, msg));
            }
            if let Some(e) = end {
                if e < n {
                    c.push(invalid_int(format!("{at}.endPort"), n, "must be greater than or equal to `port`"));
                }
                for msg in port_num_errors(e) {
                    c.push(invalid_int(format!("{at}.endPort"), e, msg));
                }
            }
        }
        None => {
            if let Some(e) = end {
                c.push(invalid_int(format!("{at}.endPort"), e, "may not be specified when `port` is not specified"));
            }
        }
    }
}

fn validate_ip_block(ipb: &Value, at: &str, c: &mut Vec<Cause>) {
    let cidr = str_of(ipb, "cidr");
    if cidr.is_empty() {
        c.push(Cause::required(format!("{at}.cidr"), ""));
        return;
    }
    let Some((net, len)) = parse_cidr(cidr) else {
        c.push(invalid_str(format!("{at}.cidr"), cidr, CIDR_MSG));
        return;
    };
    for (i, ex) in array_of(ipb, "except").iter().enumerate() {
        let ex = ex.as_str().unwrap_or("");
        let field = format!("{at}.except[{i}]");
        match parse_cidr(ex) {
            None => c.push(invalid_str(&field, ex, CIDR_MSG)),
            Some((ex_net, ex_len)) => {
                if !cidr_contains(net, len, ex_net) || len >= ex_len {
                    c.push(invalid_str(&field, ex, "must be a strict subset of `cidr`"));
                }
            }
        }
    }
}

fn validate_peer(peer: &Value, at: &str, c: &mut Vec<Cause>) {
    let mut n = 0;
    for sel in ["podSelector", "namespaceSelector"] {
        if let Some(s) = peer.get(sel).filter(|s| !s.is_null()) {
            n += 1;
            c.extend(validate_label_selector(s, &format!("{at}.{sel}")));
        }
    }
    let ip = peer.get("ipBlock").filter(|s| !s.is_null());
    if let Some(ipb) = ip {
        n += 1;
        validate_ip_block(ipb, &format!("{at}.ipBlock"), c);
    }
    if n == 0 {
        c.push(Cause::required(at, "must specify a peer"));
    } else if n > 1 && ip.is_some() {
        c.push(Cause::forbidden(at, "may not specify both ipBlock and another peer"));
    }
}

pub fn validate_network_policy(np: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let spec = np.get("spec").unwrap_or(&NULL);
    c.extend(validate_label_selector(spec.get("podSelector").unwrap_or(&NULL), "spec.podSelector"));
    for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in array_of(spec, dir).iter().enumerate() {
            let rp = format!("spec.{dir}[{i}]");
            for (j, port) in array_of(rule, "ports").iter().enumerate() {
                validate_port(port, &format!("{rp}.ports[{j}]"), &mut c);
            }
            for (j, peer) in array_of(rule, peers).iter().enumerate() {
                validate_peer(peer, &format!("{rp}.{peers}[{j}]"), &mut c);
            }
        }
    }
    let types = array_of(spec, "policyTypes");
    if types.len() > 2 {
        c.push(invalid_raw(
            "spec.policyTypes",
            format!(
                "&[]networking.PolicyType{{{}}}",
                types
                    .iter()
                    .map(|t| crate::validation::go_quote(t.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "may not specify more than two policyTypes",
        ));
        return c;
    }
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or("");
        if t != "Ingress" && t != "Egress" {
            c.push(Cause::not_supported(format!("spec.policyTypes[{i}]"), t, &["Ingress", "Egress"]));
        }
    }
    c
}

// ---- Ingress

const INVALID_PATH_SEQUENCES: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: [&str; 2] = ["/..", "/."];

fn wildcard_errors(host: &str) -> Vec<String> {
    let ok = host.strip_prefix("*.").is_some_and(|rest| dns1123_subdomain_errors(rest).is_empty());
    if ok {
        Vec::new()
    } else {
        vec!["a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()]
    }
}

fn validate_backend(b: &Value, at: &str, c: &mut Vec<Cause>) {
    let resource = b.get("resource").filter(|r| !r.is_null());
    let service = b.get("service").filter(|s| !s.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => c.push(invalid_str(at, "", "cannot set both resource and service backends")),
        (Some(r), None) => {
            let rp = format!("{at}.resource");
            if let Some(g) = r.get("apiGroup").and_then(Value::as_str) {
                for msg in dns1123_subdomain_errors(g) {
                    c.push(invalid_str(format!("{rp}.apiGroup"), g, msg));
                }
            }
            for f in ["kind", "name"] {
                let v = str_of(r, f);
                if v.is_empty() {
                    c.push(Cause::required(format!("{rp}.{f}"), format!("{f} is required")));
                } else {
                    for msg in name_errors(NameRule::PathSegment, v) {
                        c.push(invalid_str(format!("{rp}.{f}"), v, msg));
                    }
                }
            }
        }
        (None, Some(s)) => {
            let name = str_of(s, "name");
            if name.is_empty() {
                c.push(Cause::required(format!("{at}.service.name"), ""));
            } else {
                for msg in name_errors(NameRule::Dns1035Label, name) {
                    c.push(invalid_str(format!("{at}.service.name"), name, msg));
                }
            }
            let port = s.get("port").unwrap_or(&NULL);
            let pname = str_of(port, "name");
            let pnum = port.get("number").and_then(Value::as_i64).unwrap_or(0);
            match (!pname.is_empty(), pnum != 0) {
                (true, true) => c.push(invalid_str(at, "", "cannot set both port name & port number")),
                (true, false) => {
                    for msg in port_name_errors(pname) {
                        c.push(invalid_str(format!("{at}.service.port.name"), pname, msg));
                    }
                }
                (false, true) => {
                    for msg in port_num_errors(pnum) {
                        c.push(invalid_int(format!("{at}.service.port.number"), pnum, msg));
                    }
                }
                (false, false) => c.push(Cause::required(at, "port name or number is required")),
            }
        }
        (None, None) => c.push(invalid_str(at, "", "resource or service backend is required")),
    }
}

fn validate_http_path(p: &Value, at: &str, c: &mut Vec<Cause>) {
    let Some(pt) = p.get("pathType").and_then(Value::as_str) else {
        c.push(Cause::required(format!("{at}.pathType"), "pathType must be specified"));
        return;
    };
    let path = str_of(p, "path");
    match pt {
        "Exact" | "Prefix" => {
            if !path.starts_with('/') {
                c.push(invalid_str(format!("{at}.path"), path, "must be an absolute path"));
            }
            if !path.is_empty() {
                for seq in INVALID_PATH_SEQUENCES {
                    if path.contains(seq) {
                        c.push(invalid_str(format!("{at}.path"), path, format!("must not contain '{seq}'")));
                    }
                }
                for suffix in INVALID_PATH_SUFFIXES {
                    if path.ends_with(suffix) {
                        c.push(invalid_str(format!("{at}.path"), path, format!("cannot end with '{suffix}'")));
                    }
                }
            }
        }
        "ImplementationSpecific" => {
            if !path.is_empty() && !path.starts_with('/') {
                c.push(invalid_str(format!("{at}.path"), path, "must be an absolute path"));
            }
        }
        other => c.push(Cause::not_supported(
            format!("{at}.pathType"),
            other,
            &["Exact", "ImplementationSpecific", "Prefix"],
        )),
    }
    validate_backend(p.get("backend").unwrap_or(&NULL), &format!("{at}.backend"), c);
}

pub fn validate_ingress(ing: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let spec = ing.get("spec").unwrap_or(&NULL);
    let rules = array_of(spec, "rules");
    let default_backend = spec.get("defaultBackend").filter(|b| !b.is_null());
    if rules.is_empty() && default_backend.is_none() {
        let raw = if spec.get("rules").is_some_and(Value::is_array) {
            "[]networking.IngressRule{}"
        } else {
            "[]networking.IngressRule(nil)"
        };
        c.push(invalid_raw("spec", raw, "either `defaultBackend` or `rules` must be specified"));
    }
    if let Some(b) = default_backend {
        validate_backend(b, "spec.defaultBackend", &mut c);
    }
    for (i, rule) in rules.iter().enumerate() {
        let rp = format!("spec.rules[{i}]");
        let host = str_of(rule, "host");
        if !host.is_empty() {
            if host.parse::<std::net::IpAddr>().is_ok() {
                c.push(invalid_str(format!("{rp}.host"), host, "must be a DNS name, not an IP address"));
            }
            let errs = if host.contains('*') { wildcard_errors(host) } else { dns1123_subdomain_errors(host) };
            for msg in errs {
                c.push(invalid_str(format!("{rp}.host"), host, msg));
            }
        }
        if let Some(http) = rule.get("http").filter(|h| !h.is_null()) {
            let paths = array_of(http, "paths");
            if paths.is_empty() {
                c.push(Cause::required(format!("{rp}.http.paths"), ""));
            }
            for (j, p) in paths.iter().enumerate() {
                validate_http_path(p, &format!("{rp}.http.paths[{j}]"), &mut c);
            }
        }
    }
    for (i, tls) in array_of(spec, "tls").iter().enumerate() {
        for (j, host) in array_of(tls, "hosts").iter().enumerate() {
            let host = host.as_str().unwrap_or("");
            let errs = if host.contains('*') { wildcard_errors(host) } else { dns1123_subdomain_errors(host) };
            for msg in errs {
                c.push(invalid_str(format!("spec.tls[{i}].hosts[{j}]"), host, msg));
            }
        }
        let secret = str_of(tls, "secretName");
        if !secret.is_empty() {
            for msg in dns1123_subdomain_errors(secret) {
                c.push(invalid_str(format!("spec.tls[{i}].secretName"), secret, msg));
            }
        }
    }
    if let Some(class) = spec.get("ingressClassName").and_then(Value::as_str) {
        for msg in dns1123_subdomain_errors(class) {
            c.push(invalid_str("spec.ingressClassName", class, msg));
        }
    }
    c
}

/// On create, the legacy class annotation must agree with `ingressClassName`.
pub fn validate_ingress_create(ing: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let ann = ing.pointer("/metadata/annotations/kubernetes.io~1ingress.class").and_then(Value::as_str);
    let class = ing.pointer("/spec/ingressClassName").and_then(Value::as_str);
    if let (Some(a), Some(cl)) = (ann, class)
        && a != cl
    {
        c.push(invalid_str(
            "annotations.kubernetes.io/ingress.class",
            a,
            "must match `ingressClassName` when both are specified",
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn network_policy_defaults() {
        let mut np = json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}});
        default_network_policy(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(np["spec"]["podSelector"], json!({}));
        assert!(validate_network_policy(&np).is_empty());
    }

    #[test]
    fn network_policy_rules() {
        let mut np = json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Sideways"], "ingress": [{
            "ports": [{"port": 8080, "endPort": 80}, {"port": "http", "endPort": 90}, {"endPort": 5}, {"protocol": "ICMP"}],
            "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "192.168.0.0/16", "10.0.0.0/8", "bogus"]}},
                     {"ipBlock": {"cidr": "10.0.0.0/33"}}, {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}});
        default_network_policy(&mut np);
        let m = msgs(&validate_network_policy(&np));
        for want in [
            "spec.ingress[0].ports[0].endPort: Invalid value: 8080: must be greater than or equal to `port`",
            "spec.ingress[0].ports[1].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
            "spec.ingress[0].ports[2].endPort: Invalid value: 5: may not be specified when `port` is not specified",
            "spec.ingress[0].ports[3].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
            "spec.ingress[0].from[0]: Required value: must specify a peer",
            "spec.ingress[0].from[1].ipBlock.except[1]: Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[1].ipBlock.except[2]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[1].ipBlock.except[3]: Invalid value: \"bogus\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            "spec.ingress[0].from[2].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            "spec.ingress[0].from[3]: Forbidden: may not specify both ipBlock and another peer",
            "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\"",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want}\nin {m:#?}");
        }
        assert!(!m.iter().any(|x| x.contains("except[0]")), "{m:?}");
    }

    #[test]
    fn ingresses() {
        let ok = json!({"spec": {"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}});
        assert!(validate_ingress(&ok).is_empty(), "{:?}", msgs(&validate_ingress(&ok)));
        let bad = json!({"spec": {"rules": [{"host": "10.0.0.1", "http": {"paths": [
            {"path": "/a", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
            {"path": "rel", "pathType": "Exact", "backend": {"service": {"name": "web"}}},
            {"path": "/", "pathType": "Fuzzy", "backend": {}}]}}]}});
        let m = msgs(&validate_ingress(&bad));
        for want in [
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
            "spec.rules[0].http.paths[1].path: Invalid value: \"rel\": must be an absolute path",
            "spec.rules[0].http.paths[1].backend: Required value: port name or number is required",
            "spec.rules[0].http.paths[2].pathType: Unsupported value: \"Fuzzy\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            "spec.rules[0].http.paths[2].backend: Invalid value: \"\": resource or service backend is required",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want}\nin {m:#?}");
        }
        assert_eq!(
            msgs(&validate_ingress(&json!({"spec": {}}))),
            vec![
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
            ]
        );
    }
}

//! The resolver: a request and the index in, a response out. No I/O happens here, so
//! every record type's behaviour is testable without sockets. The names and their
//! answers are those of CoreDNS's kubernetes plugin (`pods insecure`) and the
//! Kubernetes DNS specification.

use std::collections::HashSet;
use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use super::index::{Index, Kind, ServiceKey};
use super::names::{is_reverse, lower_labels, parse_dashed, reverse_ip};

/// The schema version the DNS specification has `dns-version.<zone>` answer.
const SCHEMA_VERSION: &str = "1.1.0";
/// The TTL CoreDNS gives the schema version record.
const SCHEMA_VERSION_TTL: u32 = 28800;
/// How many in-zone CNAMEs one answer follows (ExternalName to ExternalName), as CoreDNS.
const MAX_CNAME_DEPTH: usize = 8;
/// The UDP payload size this server advertises over EDNS (the DNS flag day's figure).
pub const EDNS_PAYLOAD: u16 = 1232;

/// What to do with a request.
#[derive(Debug)]
pub enum Outcome {
    /// Send this response.
    Answer(Message),
    /// Not a cluster name: send the query upstream as it is.
    Forward,
    /// An in-zone CNAME to a name outside the zone (an ExternalName Service): send
    /// `response` once `target` has been resolved upstream and its records appended.
    Chase { response: Message, target: Name, qtype: RecordType },
    /// Not a query (a response, say): no answer at all.
    Drop,
}

/// Answers `request` from `index`, or says where the answer must come from.
pub fn answer(index: &Index, request: &Message) -> Outcome {
    if request.metadata.message_type != MessageType::Query {
        return Outcome::Drop;
    }
    if request.metadata.op_code != OpCode::Query {
        return Outcome::Answer(reply(request, ResponseCode::NotImp));
    }
    let [query] = request.queries.as_slice() else {
        return Outcome::Answer(reply(request, ResponseCode::FormErr));
    };
    let Some(relative) = index.zone().relative(&query.name) else {
        // Reverse names of cluster addresses are ours; every other one goes upstream
        // (CoreDNS's `fallthrough in-addr.arpa ip6.arpa`).
        let labels = lower_labels(&query.name);
        if query.query_type == RecordType::PTR && is_reverse(&labels) {
            let records = reverse_ip(&labels).map(|ip| ptr_records(index, ip, &query.name)).unwrap_or_default();
            if !records.is_empty() {
                return Outcome::Answer(positive(request, records, Vec::new()));
            }
        }
        return Outcome::Forward;
    };
    if query.query_class != DNSClass::IN && query.query_class != DNSClass::ANY {
        return Outcome::Answer(reply(request, ResponseCode::Refused));
    }
    match lookup(index, &query.name, &relative, query.query_type, 0) {
        Found::Records { answers, additionals } => Outcome::Answer(positive(request, answers, additionals)),
        Found::Chase { answers, target } => {
            Outcome::Chase { response: positive(request, answers, Vec::new()), target, qtype: query.query_type }
        }
        Found::NoData => Outcome::Answer(negative(index, request, ResponseCode::NoError)),
        Found::NxDomain => Outcome::Answer(negative(index, request, ResponseCode::NXDomain)),
    }
}

/// A response to `request` with `rcode` and nothing else: the question echoed, the
/// flags a recursive server sets, and an OPT record when the request had one.
pub fn reply(request: &Message, rcode: ResponseCode) -> Message {
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.checking_disabled = request.metadata.checking_disabled;
    // Clients see one resolver; out-of-zone names are forwarded for them.
    response.metadata.recursion_available = true;
    response.metadata.response_code = rcode;
    response.queries = request.queries.clone();
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        response.edns = Some(edns);
    }
    response
}

fn positive(request: &Message, answers: Vec<Record>, additionals: Vec<Record>) -> Message {
    let mut response = reply(request, ResponseCode::NoError);
    response.metadata.authoritative = true;
    response.answers = answers;
    response.additionals = additionals;
    response
}

/// NXDOMAIN or NODATA: the zone's SOA in the authority section, so resolvers know how
/// long to cache the absence (RFC 2308).
fn negative(index: &Index, request: &Message, rcode: ResponseCode) -> Message {
    let mut response = reply(request, rcode);
    response.metadata.authoritative = true;
    response.authorities = vec![soa(index)];
    response
}

fn soa(index: &Index) -> Record {
    let zone = index.zone();
    let mname = zone.join("ns.dns").unwrap_or_else(|| zone.name().clone());
    let rname = zone.join("hostmaster").unwrap_or_else(|| zone.name().clone());
    let data = SOA::new(mname, rname, index.serial(), 7200, 1800, 86400, index.ttl());
    Record::from_rdata(zone.name().clone(), index.ttl().min(300), RData::SOA(data))
}

/// The outcome of looking one name up in the zone.
enum Found {
    NxDomain,
    NoData,
    Records {
        answers: Vec<Record>,
        additionals: Vec<Record>,
    },
    /// These answers end in a CNAME to `target`, outside the zone.
    Chase {
        answers: Vec<Record>,
        target: Name,
    },
}

impl Found {
    fn answers(answers: Vec<Record>) -> Found {
        if answers.is_empty() { Found::NoData } else { Found::Records { answers, additionals: Vec::new() } }
    }
}

/// `relative` holds the labels of `qname` left of the zone, lower-cased.
fn lookup(index: &Index, qname: &Name, relative: &[String], qtype: RecordType, depth: usize) -> Found {
    let labels: Vec<&str> = relative.iter().map(String::as_str).collect();
    match labels.as_slice() {
        [] => apex(index, qname, qtype),
        ["dns-version"] => match qtype {
            RecordType::TXT => {
                let txt = TXT::new(vec![SCHEMA_VERSION.to_string()]);
                Found::answers(vec![Record::from_rdata(qname.clone(), SCHEMA_VERSION_TTL, RData::TXT(txt))])
            }
            _ => Found::NoData,
        },
        // An empty non-terminal: ns.dns.<zone> lives under it.
        ["dns"] => Found::NoData,
        ["ns", "dns"] => Found::answers(address_records(qname, &nameserver_ips(index), qtype, index.ttl())),
        [rest @ .., "svc"] => service_lookup(index, qname, rest, qtype, depth),
        [rest @ .., "pod"] => pod_lookup(index, qname, rest, qtype),
        _ => Found::NxDomain,
    }
}

fn apex(index: &Index, qname: &Name, qtype: RecordType) -> Found {
    match qtype {
        RecordType::SOA => {
            let mut record = soa(index);
            record.name = qname.clone();
            Found::answers(vec![record])
        }
        RecordType::NS => {
            let Some(ns) = index.zone().join("ns.dns") else { return Found::NoData };
            let record = Record::from_rdata(qname.clone(), index.ttl(), RData::NS(NS(ns.clone())));
            let mut additionals = address_records(&ns, &nameserver_ips(index), RecordType::A, index.ttl());
            additionals.extend(address_records(&ns, &nameserver_ips(index), RecordType::AAAA, index.ttl()));
            Found::Records { answers: vec![record], additionals }
        }
        _ => Found::NoData,
    }
}

/// The cluster DNS Service's addresses, for the zone's NS name.
fn nameserver_ips(index: &Index) -> Vec<IpAddr> {
    match index.entry(&ServiceKey::new("kube-system", "kube-dns")).map(|e| &e.kind) {
        Some(Kind::ClusterIp(ips)) => ips.clone(),
        _ => Vec::new(),
    }
}

/// A or AAAA records (or both, for ANY) of the addresses of that family.
fn address_records(owner: &Name, ips: &[IpAddr], qtype: RecordType, ttl: u32) -> Vec<Record> {
    let mut seen = HashSet::new();
    let mut records = Vec::new();
    for ip in ips {
        let data = match (ip, qtype) {
            (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => RData::A(A(*v4)),
            (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => RData::AAAA(AAAA(*v6)),
            _ => continue,
        };
        if seen.insert(*ip) {
            records.push(Record::from_rdata(owner.clone(), ttl, data));
        }
    }
    records
}

/// `a-b-c-d.<ns>.pod.<zone>`: the address in the name, whether or not a pod has it
/// (CoreDNS's `pods insecure`).
fn pod_lookup(index: &Index, qname: &Name, labels: &[&str], qtype: RecordType) -> Found {
    match labels {
        // pod.<zone> and <ns>.pod.<zone> exist as parents of pod names.
        [] | [_] => Found::NoData,
        [pod, _namespace] => match parse_dashed(pod) {
            Some(ip) => Found::answers(address_records(qname, &[ip], qtype, index.ttl())),
            None => Found::NxDomain,
        },
        _ => Found::NxDomain,
    }
}

/// What a Service name resolves to before the query type picks records from it (the
/// `msg.Service` list of CoreDNS's findServices).
struct Item {
    host: Host,
    /// -1: no port declared.
    port: i32,
    /// The name an SRV record points to for this address.
    target: Option<Name>,
}

enum Host {
    Ip(IpAddr),
    Alias(Name),
}

/// The parts of a name under `svc`, as CoreDNS parses them.
struct ServiceQuery<'a> {
    namespace: &'a str,
    service: &'a str,
    endpoint: Option<&'a str>,
    port: Option<&'a str>,
    protocol: Option<&'a str>,
}

fn service_lookup(index: &Index, qname: &Name, labels: &[&str], qtype: RecordType, depth: usize) -> Found {
    let query = match *labels {
        // svc.<zone> and <ns>.svc.<zone> exist as parents of Service names.
        [] | [_] => return Found::NoData,
        [service, namespace] => ServiceQuery { namespace, service, endpoint: None, port: None, protocol: None },
        [endpoint, service, namespace] => {
            ServiceQuery { namespace, service, endpoint: Some(endpoint), port: None, protocol: None }
        }
        [port, protocol, service, namespace] => ServiceQuery {
            namespace,
            service,
            endpoint: None,
            port: Some(port.strip_prefix('_').unwrap_or(port)),
            protocol: Some(protocol.strip_prefix('_').unwrap_or(protocol)),
        },
        _ => return Found::NxDomain,
    };
    let Some(items) = service_items(index, &query) else { return Found::NxDomain };
    let ttl = index.ttl();
    match qtype {
        RecordType::A | RecordType::AAAA | RecordType::ANY => {
            let alias = items.iter().find_map(|item| match &item.host {
                Host::Alias(name) => Some(name.clone()),
                Host::Ip(_) => None,
            });
            if let Some(target) = alias {
                return follow_cname(index, qname, target, qtype, depth);
            }
            let ips: Vec<IpAddr> = items
                .iter()
                .filter_map(|item| match item.host {
                    Host::Ip(ip) => Some(ip),
                    Host::Alias(_) => None,
                })
                .collect();
            Found::answers(address_records(qname, &ips, qtype, ttl))
        }
        RecordType::CNAME => {
            let records = items
                .iter()
                .filter_map(|item| match &item.host {
                    Host::Alias(name) => Some(cname(qname, name, ttl)),
                    Host::Ip(_) => None,
                })
                .take(1)
                .collect();
            Found::answers(records)
        }
        RecordType::SRV => srv_records(qname, &items, ttl),
        _ => Found::NoData,
    }
}

fn cname(owner: &Name, target: &Name, ttl: u32) -> Record {
    Record::from_rdata(owner.clone(), ttl, RData::CNAME(CNAME(target.clone())))
}

/// The CNAME, then the target's records when it is in the zone (CoreDNS follows those
/// itself); for a target outside, the server resolves it upstream.
fn follow_cname(index: &Index, qname: &Name, target: Name, qtype: RecordType, depth: usize) -> Found {
    let record = cname(qname, &target, index.ttl());
    match index.zone().relative(&target) {
        Some(relative) if depth < MAX_CNAME_DEPTH => {
            let mut answers = vec![record];
            match lookup(index, &target, &relative, qtype, depth + 1) {
                Found::Records { answers: more, .. } => answers.extend(more),
                Found::Chase { answers: more, target } => {
                    answers.extend(more);
                    return Found::Chase { answers, target };
                }
                Found::NoData | Found::NxDomain => {}
            }
            Found::answers(answers)
        }
        Some(_) => Found::answers(vec![record]),
        None => Found::Chase { answers: vec![record], target },
    }
}

/// SRV records as CoreDNS makes them: priority 0, each weight 100 divided by the
/// number of records, targets given their addresses in the additional section.
fn srv_records(qname: &Name, items: &[Item], ttl: u32) -> Found {
    // ExternalName Services make no SRV records (CoreDNS drops them before counting).
    let items: Vec<&Item> = items.iter().filter(|item| matches!(item.host, Host::Ip(_))).collect();
    if items.is_empty() {
        return Found::NoData;
    }
    let weight = u16::try_from(100 / items.len()).unwrap_or(0);
    let mut answers = Vec::new();
    let mut additionals = Vec::new();
    let mut seen_srv = HashSet::new();
    let mut seen_address = HashSet::new();
    for item in items {
        let (Host::Ip(ip), Some(target), Ok(port)) = (&item.host, &item.target, u16::try_from(item.port)) else {
            continue;
        };
        if seen_srv.insert((target.clone(), port)) {
            let srv = SRV::new(0, weight, port, target.clone());
            answers.push(Record::from_rdata(qname.clone(), ttl, RData::SRV(srv)));
        }
        if seen_address.insert((target.clone(), *ip)) {
            additionals.extend(address_records(target, &[*ip], RecordType::ANY, ttl));
        }
    }
    if answers.is_empty() { Found::NoData } else { Found::Records { answers, additionals } }
}

/// What a Service name stands for; None when nothing matches (NXDOMAIN), as CoreDNS's
/// errNoItems: no such Service, no matching port, or a headless Service without ready
/// endpoints.
fn service_items(index: &Index, query: &ServiceQuery<'_>) -> Option<Vec<Item>> {
    let entry = index.entry(&ServiceKey::new(query.namespace, query.service))?;
    let zone = index.zone();
    let base = format!("{}.{}.svc", query.service, query.namespace);
    let wanted = |name: &str, protocol: &str| {
        query.port.is_none_or(|p| p == name) && query.protocol.is_none_or(|p| p == protocol)
    };
    match &entry.kind {
        Kind::ExternalName(target) => {
            // An ExternalName Service has no endpoints to name.
            if query.endpoint.is_some() {
                return None;
            }
            let target = target.clone()?;
            Some(vec![Item { host: Host::Alias(target), port: 0, target: None }])
        }
        Kind::Headless => endpoint_items(entry, query, &base, index, &wanted),
        Kind::ClusterIp(_) if query.endpoint.is_some() => endpoint_items(entry, query, &base, index, &wanted),
        Kind::ClusterIp(ips) => {
            let target = zone.join(&base);
            let mut matched = false;
            let mut items = Vec::new();
            for port in entry.ports.iter().filter(|p| wanted(&p.name, &p.protocol)) {
                matched = true;
                for ip in ips {
                    items.push(Item { host: Host::Ip(*ip), port: port.port, target: target.clone() });
                }
            }
            matched.then_some(items)
        }
    }
}

fn endpoint_items(
    entry: &super::index::Entry,
    query: &ServiceQuery<'_>,
    base: &str,
    index: &Index,
    wanted: &dyn Fn(&str, &str) -> bool,
) -> Option<Vec<Item>> {
    let mut items = Vec::new();
    for endpoint in &entry.endpoints {
        if query.endpoint.is_some_and(|label| label != endpoint.label) {
            continue;
        }
        let target = index.zone().join(&format!("{}.{base}", endpoint.label));
        for port in endpoint.ports.iter() {
            // The "no ports" sentinel matches only queries that name no port.
            let matches = if port.port == -1 { query.port.is_none() } else { wanted(&port.name, &port.protocol) };
            if matches {
                items.push(Item { host: Host::Ip(endpoint.ip), port: port.port, target: target.clone() });
            }
        }
    }
    (!items.is_empty()).then_some(items)
}

/// PTR records for a cluster address: a cluster IP names its Service, an endpoint
/// address names the endpoint (by hostname or dashed address) under its Service.
fn ptr_records(index: &Index, ip: IpAddr, qname: &Name) -> Vec<Record> {
    let zone = index.zone();
    let mut targets: Vec<Name> = index
        .services_with_cluster_ip(ip)
        .filter_map(|key| zone.join(&format!("{}.{}.svc", key.name, key.namespace)))
        .collect();
    if targets.is_empty() {
        targets = index
            .endpoints_with_ip(ip)
            .filter_map(|(key, label)| zone.join(&format!("{label}.{}.{}.svc", key.name, key.namespace)))
            .collect();
    }
    targets.dedup();
    targets.into_iter().map(|target| Record::from_rdata(qname.clone(), index.ttl(), RData::PTR(PTR(target)))).collect()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use hickory_proto::op::Query;
    use serde_json::json;

    use super::super::index::tests::{service, slice};
    use super::super::index::{DEFAULT_TTL, Index};
    use super::*;

    /// default/web (ClusterIP, http/TCP 80 and dns/UDP 53), default/dual (dual-stack),
    /// default/db (headless: db-0 at 10.0.0.2, a nameless 10.0.0.1, a not-ready
    /// 10.0.0.3), default/early (headless, publishNotReadyAddresses, one not-ready
    /// endpoint), default/none (headless, no endpoints), three ExternalNames and the
    /// cluster DNS Service.
    fn index() -> Index {
        let mut index = Index::new("cluster.local", DEFAULT_TTL).unwrap();
        let web = service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "dns", "port": 53, "protocol": "UDP"}
            ]}
        }));
        index.update("default", "web", Some(&web), []);
        let dual = service(json!({
            "metadata": {"name": "dual", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.11", "clusterIPs": ["10.96.0.11", "fd00::11"], "ports": [{"name": "http", "port": 80}]}
        }));
        index.update("default", "dual", Some(&dual), []);
        let db = service(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
        }));
        let db_slice = slice(json!({
            "metadata": {"name": "db-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.0.0.2"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.3"], "hostname": "db-2", "conditions": {"ready": false}}
            ]
        }));
        index.update("default", "db", Some(&db), [&db_slice]);
        let early = service(json!({
            "metadata": {"name": "early", "namespace": "default"},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true}
        }));
        let early_slice = slice(json!({
            "metadata": {"name": "early-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "early"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.1.1"], "conditions": {"ready": false}}]
        }));
        index.update("default", "early", Some(&early), [&early_slice]);
        let none =
            service(json!({"metadata": {"name": "none", "namespace": "default"}, "spec": {"clusterIP": "None"}}));
        index.update("default", "none", Some(&none), []);
        for (name, target) in [("ext", "Example.COM"), ("alias", "web.default.svc.cluster.local"), ("byip", "1.2.3.4")]
        {
            let ext = service(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": target}
            }));
            index.update("default", name, Some(&ext), []);
        }
        let dns = service(json!({
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {"clusterIP": "10.96.0.53", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
        }));
        index.update("kube-system", "kube-dns", Some(&dns), []);
        index
    }

    fn request(name: &str, qtype: RecordType) -> Message {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        message
    }

    fn ask(index: &Index, name: &str, qtype: RecordType) -> Message {
        match answer(index, &request(name, qtype)) {
            Outcome::Answer(message) => message,
            other => panic!("{name} {qtype}: expected an answer, got {other:?}"),
        }
    }

    fn ipv4s(message: &Message) -> Vec<Ipv4Addr> {
        message
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect()
    }

    fn names(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .filter_map(|r| match &r.data {
                RData::CNAME(n) => Some(n.0.to_ascii()),
                RData::PTR(n) => Some(n.0.to_ascii()),
                RData::SRV(srv) => Some(format!("{} {} {} {}", srv.priority, srv.weight, srv.port, srv.target)),
                _ => None,
            })
            .collect()
    }

    fn assert_negative(message: &Message, rcode: ResponseCode) {
        assert_eq!(message.metadata.response_code, rcode);
        assert!(message.answers.is_empty(), "{message:?}");
        assert!(message.metadata.authoritative);
        let [soa] = message.authorities.as_slice() else { panic!("one SOA expected: {message:?}") };
        let RData::SOA(data) = &soa.data else { panic!("not an SOA: {soa:?}") };
        assert_eq!(soa.name.to_ascii(), "cluster.local.");
        assert_eq!(data.mname.to_ascii(), "ns.dns.cluster.local.");
        assert_eq!(data.rname.to_ascii(), "hostmaster.cluster.local.");
        assert_eq!(data.minimum, DEFAULT_TTL);
        assert_eq!(soa.ttl, DEFAULT_TTL);
    }

    #[test]
    fn cluster_ip_service_a_record() {
        let response = ask(&index(), "web.default.svc.cluster.local.", RecordType::A);
        assert_eq!(response.metadata.response_code, ResponseCode::NoError);
        assert!(response.metadata.authoritative && response.metadata.recursion_available);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 10)]);
        assert_eq!(response.answers[0].ttl, 5);
        assert_eq!(response.answers[0].name.to_ascii(), "web.default.svc.cluster.local.");
        assert_eq!(response.queries, request("web.default.svc.cluster.local.", RecordType::A).queries);
    }

    #[test]
    fn aaaa_is_the_ipv6_cluster_ip_or_nodata() {
        let response = ask(&index(), "dual.default.svc.cluster.local.", RecordType::AAAA);
        let RData::AAAA(aaaa) = &response.answers[0].data else { panic!("{response:?}") };
        assert_eq!(aaaa.0, "fd00::11".parse::<Ipv6Addr>().unwrap());
        assert_eq!(response.answers.len(), 1);
        let response = ask(&index(), "dual.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 11)]);
        // IPv4 only: the name exists, the type does not.
        assert_negative(&ask(&index(), "web.default.svc.cluster.local.", RecordType::AAAA), ResponseCode::NoError);
    }

    #[test]
    fn missing_names_are_nxdomain_and_parents_nodata() {
        let index = index();
        for name in [
            "nope.default.svc.cluster.local.",
            "web.other.svc.cluster.local.",
            "x.cluster.local.",
            "a.b.c.web.default.svc.cluster.local.",
            "_nope._tcp.web.default.svc.cluster.local.",
            "nope.web.default.svc.cluster.local.",
        ] {
            assert_negative(&ask(&index, name, RecordType::A), ResponseCode::NXDomain);
        }
        for name in ["svc.cluster.local.", "default.svc.cluster.local.", "pod.cluster.local.", "cluster.local."] {
            assert_negative(&ask(&index, name, RecordType::A), ResponseCode::NoError);
        }
        // Other types on an existing name: NODATA; on a missing one: NXDOMAIN.
        assert_negative(&ask(&index, "web.default.svc.cluster.local.", RecordType::TXT), ResponseCode::NoError);
        assert_negative(&ask(&index, "web.default.svc.cluster.local.", RecordType::MX), ResponseCode::NoError);
        assert_negative(&ask(&index, "nope.default.svc.cluster.local.", RecordType::TXT), ResponseCode::NXDomain);
    }

    #[test]
    fn headless_service_answers_ready_endpoints() {
        let index = index();
        let response = ask(&index, "db.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)]);
        // publishNotReadyAddresses: the not-ready endpoint too.
        let response = ask(&index, "early.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 0, 1, 1)]);
        // No ready endpoints at all: NXDOMAIN, as CoreDNS answers.
        assert_negative(&ask(&index, "none.default.svc.cluster.local.", RecordType::A), ResponseCode::NXDomain);
    }

    #[test]
    fn endpoint_names_by_hostname_or_dashed_address() {
        let index = index();
        let response = ask(&index, "db-0.db.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 0, 0, 2)]);
        let response = ask(&index, "10-0-0-1.db.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 0, 0, 1)]);
        // Not ready, and not published: no name.
        assert_negative(&ask(&index, "db-2.db.default.svc.cluster.local.", RecordType::A), ResponseCode::NXDomain);
    }

    #[test]
    fn srv_of_cluster_ip_service() {
        let index = index();
        let response = ask(&index, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(names(&response.answers), vec!["0 100 80 web.default.svc.cluster.local."]);
        assert_eq!(response.additionals.len(), 1);
        assert_eq!(response.additionals[0].name.to_ascii(), "web.default.svc.cluster.local.");
        assert_eq!(response.additionals[0].data, RData::A(A::new(10, 96, 0, 10)));
        let response = ask(&index, "_dns._udp.web.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(names(&response.answers), vec!["0 100 53 web.default.svc.cluster.local."]);
        // The right name with the wrong protocol names nothing.
        assert_negative(
            &ask(&index, "_http._udp.web.default.svc.cluster.local.", RecordType::SRV),
            ResponseCode::NXDomain,
        );
        // The bare Service name: every port, weights split between them.
        let response = ask(&index, "web.default.svc.cluster.local.", RecordType::SRV);
        let mut got = names(&response.answers);
        got.sort();
        assert_eq!(got, vec!["0 50 53 web.default.svc.cluster.local.", "0 50 80 web.default.svc.cluster.local."]);
        // An A query for the SRV name gives the Service's address.
        let response = ask(&index, "_http._tcp.web.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 10)]);
    }

    #[test]
    fn srv_of_headless_service_names_each_endpoint() {
        let response = ask(&index(), "_pg._tcp.db.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(
            names(&response.answers),
            vec!["0 50 5432 10-0-0-1.db.default.svc.cluster.local.", "0 50 5432 db-0.db.default.svc.cluster.local."]
        );
        let additional: Vec<(String, RData)> =
            response.additionals.iter().map(|r| (r.name.to_ascii(), r.data.clone())).collect();
        assert_eq!(
            additional,
            vec![
                ("10-0-0-1.db.default.svc.cluster.local.".to_string(), RData::A(A::new(10, 0, 0, 1))),
                ("db-0.db.default.svc.cluster.local.".to_string(), RData::A(A::new(10, 0, 0, 2))),
            ]
        );
        // A headless Service without ports resolves but has no SRV records.
        assert_negative(&ask(&index(), "early.default.svc.cluster.local.", RecordType::SRV), ResponseCode::NoError);
    }

    #[test]
    fn external_name_is_a_cname() {
        let index = index();
        // Outside the zone: the CNAME now, the target's addresses from upstream.
        match answer(&index, &request("ext.default.svc.cluster.local.", RecordType::A)) {
            Outcome::Chase { response, target, qtype } => {
                assert_eq!(target.to_ascii(), "Example.COM.");
                assert_eq!(qtype, RecordType::A);
                assert_eq!(names(&response.answers), vec!["Example.COM."]);
            }
            other => panic!("expected a chase, got {other:?}"),
        }
        let response = ask(&index, "ext.default.svc.cluster.local.", RecordType::CNAME);
        assert_eq!(names(&response.answers), vec!["Example.COM."]);
        // Inside the zone: followed here.
        let response = ask(&index, "alias.default.svc.cluster.local.", RecordType::A);
        assert_eq!(names(&response.answers), vec!["web.default.svc.cluster.local."]);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 10)]);
        // No SRV records, no endpoint names, and an address is no CNAME target.
        assert_negative(&ask(&index, "ext.default.svc.cluster.local.", RecordType::SRV), ResponseCode::NoError);
        assert_negative(&ask(&index, "x.ext.default.svc.cluster.local.", RecordType::A), ResponseCode::NXDomain);
        assert_negative(&ask(&index, "byip.default.svc.cluster.local.", RecordType::A), ResponseCode::NXDomain);
    }

    #[test]
    fn ptr_of_cluster_ips_and_endpoints() {
        let index = index();
        let response = ask(&index, "10.0.96.10.in-addr.arpa.", RecordType::PTR);
        assert_eq!(names(&response.answers), vec!["web.default.svc.cluster.local."]);
        assert_eq!(response.answers[0].name.to_ascii(), "10.0.96.10.in-addr.arpa.");
        let response = ask(&index, "2.0.0.10.in-addr.arpa.", RecordType::PTR);
        assert_eq!(names(&response.answers), vec!["db-0.db.default.svc.cluster.local."]);
        let response = ask(&index, "1.0.0.10.IN-ADDR.ARPA.", RecordType::PTR);
        assert_eq!(names(&response.answers), vec!["10-0-0-1.db.default.svc.cluster.local."]);
        let v6 = Name::from("fd00::11".parse::<IpAddr>().unwrap()).to_ascii();
        let response = ask(&index, &v6, RecordType::PTR);
        assert_eq!(names(&response.answers), vec!["dual.default.svc.cluster.local."]);
        // Unknown addresses, partial names and other types are upstream's.
        for (name, qtype) in [
            ("9.9.9.9.in-addr.arpa.", RecordType::PTR),
            ("96.10.in-addr.arpa.", RecordType::PTR),
            ("10.0.96.10.in-addr.arpa.", RecordType::A),
        ] {
            assert!(matches!(answer(&index, &request(name, qtype)), Outcome::Forward), "{name}");
        }
    }

    #[test]
    fn pod_names_are_their_address() {
        let index = index();
        let response = ask(&index, "10-244-1-5.default.pod.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 244, 1, 5)]);
        let response = ask(&index, "fd00--5.any.pod.cluster.local.", RecordType::AAAA);
        assert_eq!(response.answers[0].data, RData::AAAA(AAAA("fd00::5".parse().unwrap())));
        assert_negative(&ask(&index, "10-244-1-5.default.pod.cluster.local.", RecordType::AAAA), ResponseCode::NoError);
        assert_negative(&ask(&index, "not-an-ip.default.pod.cluster.local.", RecordType::A), ResponseCode::NXDomain);
    }

    #[test]
    fn names_are_case_insensitive() {
        let index = index();
        let response = ask(&index, "WEB.Default.SVC.Cluster.LOCAL.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 10)]);
        // The owner is the name as asked (resolvers compare it with their question).
        assert_eq!(response.answers[0].name.to_ascii(), "WEB.Default.SVC.Cluster.LOCAL.");
        let response = ask(&index, "_PG._TCP.DB.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(response.answers.len(), 2);
        let response = ask(&index, "DB-0.db.default.svc.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 0, 0, 2)]);
    }

    #[test]
    fn outside_the_zone_is_forwarded() {
        let index = index();
        for name in ["example.com.", "local.", "cluster.local.example.com.", "svc.cluster.locals."] {
            assert!(matches!(answer(&index, &request(name, RecordType::A)), Outcome::Forward), "{name}");
        }
    }

    #[test]
    fn zone_apex_and_schema_version() {
        let index = index();
        let response = ask(&index, "dns-version.cluster.local.", RecordType::TXT);
        let RData::TXT(txt) = &response.answers[0].data else { panic!("{response:?}") };
        assert_eq!(txt.txt_data.iter().map(|d| d.to_vec()).collect::<Vec<_>>(), vec![b"1.1.0".to_vec()]);
        assert_eq!(response.answers[0].ttl, 28800);
        let response = ask(&index, "cluster.local.", RecordType::SOA);
        assert!(matches!(response.answers[0].data, RData::SOA(_)));
        let response = ask(&index, "cluster.local.", RecordType::NS);
        assert_eq!(response.answers[0].data, RData::NS(NS(Name::from_ascii("ns.dns.cluster.local.").unwrap())));
        assert_eq!(response.additionals[0].data, RData::A(A::new(10, 96, 0, 53)));
        let response = ask(&index, "ns.dns.cluster.local.", RecordType::A);
        assert_eq!(ipv4s(&response), vec![Ipv4Addr::new(10, 96, 0, 53)]);
    }

    #[test]
    fn odd_requests_get_errors_not_answers() {
        let index = index();
        let mut response = request("web.default.svc.cluster.local.", RecordType::A);
        response.metadata.message_type = MessageType::Response;
        assert!(matches!(answer(&index, &response), Outcome::Drop));

        let mut two = request("web.default.svc.cluster.local.", RecordType::A);
        two.add_query(Query::query(Name::from_ascii("db.default.svc.cluster.local.").unwrap(), RecordType::A));
        assert_eq!(ask_message(&index, &two).metadata.response_code, ResponseCode::FormErr);

        let mut none = request("web.default.svc.cluster.local.", RecordType::A);
        none.queries.clear();
        assert_eq!(ask_message(&index, &none).metadata.response_code, ResponseCode::FormErr);

        let mut status = request("web.default.svc.cluster.local.", RecordType::A);
        status.metadata.op_code = OpCode::Status;
        assert_eq!(ask_message(&index, &status).metadata.response_code, ResponseCode::NotImp);

        let mut chaos = request("web.default.svc.cluster.local.", RecordType::A);
        chaos.queries[0].query_class = DNSClass::CH;
        assert_eq!(ask_message(&index, &chaos).metadata.response_code, ResponseCode::Refused);
    }

    fn ask_message(index: &Index, request: &Message) -> Message {
        match answer(index, request) {
            Outcome::Answer(message) => {
                assert_eq!(message.metadata.id, request.metadata.id);
                message
            }
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn edns_requests_get_an_opt_record() {
        let mut with_edns = request("web.default.svc.cluster.local.", RecordType::A);
        with_edns.edns = Some(Edns::new());
        let response = ask_message(&index(), &with_edns);
        assert_eq!(response.edns.as_ref().map(Edns::max_payload), Some(EDNS_PAYLOAD));
        assert!(ask(&index(), "web.default.svc.cluster.local.", RecordType::A).edns.is_none());
    }

    #[test]
    fn answers_follow_index_changes() {
        let mut index = index();
        index.update("default", "web", None, []);
        assert_negative(&ask(&index, "web.default.svc.cluster.local.", RecordType::A), ResponseCode::NXDomain);
        assert!(matches!(answer(&index, &request("10.0.96.10.in-addr.arpa.", RecordType::PTR)), Outcome::Forward));
        // The alias to it now resolves to the CNAME alone.
        let response = ask(&index, "alias.default.svc.cluster.local.", RecordType::A);
        assert_eq!(names(&response.answers), vec!["web.default.svc.cluster.local."]);
        assert!(ipv4s(&response).is_empty());
    }

    #[test]
    fn another_zone_is_honoured() {
        let mut index = Index::new("k8s.example", DEFAULT_TTL).unwrap();
        let web = service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
        }));
        index.update("default", "web", Some(&web), []);
        assert_eq!(
            ipv4s(&ask(&index, "web.default.svc.k8s.example.", RecordType::A)),
            vec![Ipv4Addr::new(10, 96, 0, 10)]
        );
        assert!(matches!(answer(&index, &request("web.default.svc.cluster.local.", RecordType::A)), Outcome::Forward));
    }
}

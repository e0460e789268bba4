//! Member names with and without module prefixes, and the same member given twice.
#![allow(clippy::unwrap_used)]

use coe::rest::parse;
use coe::rest::types::{Item, Kind};

#[test]
fn prefixed_and_bare_members_read_alike() {
    let prefixed = br#"{"service:service-information":{"service:services":[{"service:uid":"u1",
        "service:name":"web","service:cluster-ip-address":"10.96.0.1",
        "service:service-ports":[{"service:port":80,"service:name":"http"}]}]}}"#;
    let bare = br#"{"services":[{"uid":"u1","name":"web","cluster-ip-address":"10.96.0.1",
        "service-ports":[{"port":80,"name":"http"}]}]}"#;
    let a = parse::container_body(Kind::Service, prefixed).unwrap();
    let b = parse::container_body(Kind::Service, bare).unwrap();
    assert_eq!(a, b);
    let Item::Service(s) = &a[0] else {
        panic!("{a:?}")
    };
    assert_eq!((s.name.as_str(), s.service_ports[0].port), ("web", 80));
}

#[test]
fn a_member_given_twice_is_refused_with_its_path() {
    for (body, path) in [
        (
            &br#"{"services":[{"uid":"u1","service:uid":"u2"}]}"#[..],
            "services[0].uid",
        ),
        (
            br#"{"services":[{"uid":"u1","service-ports":[{"port":80,"service:port":81}]}]}"#,
            "services[0].service-ports[0].port",
        ),
        (br#"{"service:services":[],"services":[]}"#, "services"),
        // Under one name too: JSON parsers differ on which one wins, so neither does.
        (
            br#"{"services":[{"uid":"u1","name":"a","name":"b"}]}"#,
            "services[0].name",
        ),
        (
            br#"{"services":[{"uid":"u1","service-ports":[{"port":80,"port":81}]}]}"#,
            "services[0].service-ports[0].port",
        ),
    ] {
        let err = parse::container_body(Kind::Service, body).unwrap_err();
        let text = format!("{err:?} {err}");
        assert!(text.contains("more than once"), "{text}");
        assert!(text.contains(path), "{path}: {text}");
    }
}

/// An object of many members (unknown ones are ignored, not their repeats) is checked by
/// sorting its names, so its cost stays n log n.
#[test]
fn a_repeat_among_many_members_is_refused() {
    let mut members: Vec<String> = (0..40).map(|i| format!(r#""x{i}":{i}"#)).collect();
    members.push(r#""x7":0"#.into());
    let body = format!(r#"{{"services":[{{"uid":"u1",{}}}]}}"#, members.join(","));
    let err = parse::container_body(Kind::Service, body.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("more than once"), "{err}");
    assert!(format!("{err:?} {err}").contains("x7"), "{err}");
    let item = format!(r#"{{"services":[{{"uid":"u1",{}}}]}}"#, members.join(","));
    let err = parse::item_body(Kind::Service, "u1", item.as_bytes()).unwrap_err();
    assert!(format!("{err:?} {err}").contains("x7"), "{err}");
    members.pop();
    let body = format!(r#"{{"services":[{{"uid":"u1",{}}}]}}"#, members.join(","));
    assert!(parse::container_body(Kind::Service, body.as_bytes()).is_ok());
}

/// Names that print like other names are refused: Unicode control and format characters
/// (a right-to-left override, a zero-width space, a byte-order mark).
#[test]
fn names_with_invisible_characters_are_refused() {
    for name in [
        "web\u{202E}",
        "w\u{200B}eb",
        "\u{FEFF}web",
        "web\u{7}",
        "we\u{2066}b",
    ] {
        let body = serde_json::json!({"services": [{"uid": "u1", "name": name}]}).to_string();
        let err = parse::container_body(Kind::Service, body.as_bytes()).unwrap_err();
        assert_eq!(err.status(), 400, "{name:?}");
        assert!(err.to_string().contains("not a valid name"), "{err}");
    }
    // Other scripts are names like any.
    let body = r#"{"services":[{"uid":"u1","name":"сервис-名前"}]}"#;
    assert!(parse::container_body(Kind::Service, body.as_bytes()).is_ok());
}

/// An error quotes a short excerpt of the value it refuses, never the whole of it.
#[test]
fn errors_quote_an_excerpt_of_a_huge_value() {
    let huge = "x".repeat(1_000_000);
    let body = format!(r#"{{"services":[{{"uid":"u1","cluster-ip-address":"{huge}"}}]}}"#);
    let err = parse::container_body(Kind::Service, body.as_bytes()).unwrap_err();
    let text = serde_json::to_string(&err.body()).unwrap();
    assert!(text.len() < 1_000, "{} bytes of error", text.len());
    assert!(text.contains("(1000000 bytes)"), "{text}");
}

/// A dual-stack node's `pod-cidr` is a pair, one CIDR of each family, as Kubernetes spells
/// `--cluster-cidr`; two of one family are refused with the member's path. It serializes back
/// as it was given.
#[test]
fn a_dual_stack_pod_cidr_is_a_pair_of_families() {
    let body = br#"{"k8s-nodes":[{"uid":"n1","host-name":"n1",
        "pod-cidr":"10.244.1.0/24, fd00:10:244:1::/64"}]}"#;
    let items = parse::container_body(Kind::Node, body).unwrap();
    let Item::Node(n) = &items[0] else {
        panic!("{items:?}")
    };
    let cidrs: Vec<String> = n.pod_cidrs.iter().map(ToString::to_string).collect();
    assert_eq!(cidrs, ["10.244.1.0/24", "fd00:10:244:1::/64"]);
    let json = serde_json::to_value(n).unwrap();
    assert_eq!(json["pod-cidr"], "10.244.1.0/24,fd00:10:244:1::/64");
    for bad in [
        "10.244.1.0/24,10.244.2.0/24",
        "fd00::/64,fd01::/64",
        "10.244.1.0/24,x",
    ] {
        let body = format!(r#"{{"k8s-nodes":[{{"uid":"n1","pod-cidr":"{bad}"}}]}}"#);
        let err = parse::container_body(Kind::Node, body.as_bytes()).unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains("k8s-nodes[n1].pod-cidr") || text.contains("pod-cidr"),
            "{bad}: {text}"
        );
    }
}

/// A long list is converted in two halves at once: the same items in the same order as entry
/// by entry, and the error of the first bad entry by position, whichever half it is in.
#[test]
fn a_long_list_reads_as_its_entries_one_by_one_and_fails_at_its_first_bad_entry() {
    let n = 5_000;
    let entry = numbered_service;
    let body = |entries: &[String]| format!(r#"{{"services":[{}]}}"#, entries.join(","));
    let entries: Vec<String> = (0..n).map(entry).collect();
    let all = parse::container_body(Kind::Service, body(&entries).as_bytes()).unwrap();
    let one_by_one: Vec<Item> = entries
        .iter()
        .map(|e| {
            let mut items =
                parse::container_body(Kind::Service, body(std::slice::from_ref(e)).as_bytes())
                    .unwrap();
            items.remove(0)
        })
        .collect();
    assert_eq!(all, one_by_one);
    // A bad address at 4,000 (second half), then also at 100 (first half).
    let mut bad = entries.clone();
    bad[4_000] = bad[4_000].replace("10.96.16.1", "10.96.16.x");
    let err = parse::container_body(Kind::Service, body(&bad).as_bytes()).unwrap_err();
    assert!(err.to_string().contains("services[u4000]"), "{err}");
    bad[100] = bad[100].replace("10.96.0.101", "not an address");
    let err = parse::container_body(Kind::Service, body(&bad).as_bytes()).unwrap_err();
    assert!(err.to_string().contains("services[u100]"), "{err}");
}

/// A body of the whole datastore: each container as its own PUT reads it, in any order, with
/// or without its module prefix; each must be there once, and nothing else may.
#[test]
fn a_datastore_body_reads_each_container_as_its_own_put_does() {
    let services = r#"{"services":[{"uid":"u1","name":"web","cluster-ip-address":"10.96.0.1",
        "service-ports":[{"port":80}]}]}"#;
    let endpoints = r#"{"endpoints":[{"uid":"e1","name":"web",
        "endpoint-addresses":[{"ip-address":"10.244.0.5"}],"endpoint-ports":[{"port":8080}]}]}"#;
    let body = format!(
        r#"{{"service:endpoints-info":{endpoints},"pod:coe":{{"pods":[]}},
        "service-information":{services},"k8s-node:k8s-nodes-info":{{}}}}"#
    );
    let lists = parse::datastore_body(body.as_bytes()).unwrap();
    let kinds: Vec<Kind> = lists.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [Kind::Endpoints, Kind::Pod, Kind::Service, Kind::Node]
    );
    reads_as_alone(&lists[0], Kind::Endpoints, endpoints);
    reads_as_alone(&lists[2], Kind::Service, services);
    assert!(lists[1].1.is_empty() && lists[3].1.is_empty());

    let all = r#""service:service-information":{},"service:endpoints-info":{},"pod:coe":{}"#;
    for (body, says) in [
        // A container left out would be emptied: it must be given, even empty.
        (
            format!("{{{all}}}"),
            "missing `k8s-node:k8s-nodes-info`".to_string(),
        ),
        (
            "{}".to_string(),
            "missing `service:service-information`".into(),
        ),
        (
            format!(r#"{{{all},"k8s-node:k8s-nodes-info":{{}},"k8s-node:k8s-nodes-info":{{}}}}"#),
            "k8s-nodes-info: member given more than once".into(),
        ),
        (
            format!(r#"{{{all},"k8s-node:k8s-nodes-info":{{}},"service:services":[]}}"#),
            "services: not a container of this datastore".into(),
        ),
        // An error inside a container names its item, as that container's PUT does.
        (
            format!(
                r#"{{{all},"k8s-node:k8s-nodes-info":{{"k8s-nodes":[{{"uid":"n1","internal-ip-address":"x"}}]}}}}"#
            ),
            "k8s-nodes[n1]".into(),
        ),
        ("[]".to_string(), "body must be a JSON object".into()),
        (format!("{{{all}"), "body is not JSON".into()),
    ] {
        let err = parse::datastore_body(body.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(&says), "{body}: {err}");
    }
}

/// A container of a datastore body is `kind`'s and holds the items its text gives as a PUT
/// of that container.
fn reads_as_alone(list: &(Kind, Vec<Item>), kind: Kind, text: &str) {
    assert_eq!(list.0, kind);
    assert_eq!(
        list.1,
        parse::container_body(kind, text.as_bytes()).unwrap()
    );
}

/// The biggest container is read on a thread of its own: a long one reads as it does alone,
/// and of two bad containers the first in the body is the one reported.
#[test]
fn a_long_datastore_body_reads_as_its_containers_and_fails_at_the_first_bad_one() {
    let n = 5_000;
    let services: Vec<String> = (0..n).map(numbered_service).collect();
    let services = format!(r#"{{"services":[{}]}}"#, services.join(","));
    let pods = r#"{"pods":[{"uid":"p1","interface":[{"uid":"i1","ip-address":"10.244.0.5"}]}]}"#;
    let body = |services: &str, pods: &str| {
        format!(
            r#"{{"pod:coe":{pods},"service:service-information":{services},
            "service:endpoints-info":{{}},"k8s-node:k8s-nodes-info":{{}}}}"#
        )
    };
    let lists = parse::datastore_body(body(&services, pods).as_bytes()).unwrap();
    reads_as_alone(&lists[1], Kind::Service, &services);
    reads_as_alone(&lists[0], Kind::Pod, pods);
    let bad_services = services.replace("10.96.16.1\"", "10.96.16.x\"");
    let err = parse::datastore_body(body(&bad_services, pods).as_bytes()).unwrap_err();
    assert!(err.to_string().contains("services[u4000]"), "{err}");
    let bad_pods = pods.replace("10.244.0.5", "nope");
    let err = parse::datastore_body(body(&bad_services, &bad_pods).as_bytes()).unwrap_err();
    assert!(err.to_string().contains("pods[p1]"), "{err}");
}

/// Service `u{i}` of a long list: its own name and address (10.96.0.1 for 0, 10.96.16.1 for
/// 4,000), port 80.
fn numbered_service(i: usize) -> String {
    format!(
        r#"{{"uid":"u{i}","name":"s{i}","cluster-ip-address":"10.96.{}.{}","service-ports":[{{"port":80}}]}}"#,
        i / 250,
        i % 250 + 1
    )
}

/// The store keeps the parsed values themselves, so their lists hold no spare room (a list
/// grown by pushing has room for four: about 200 bytes a service or endpoints object).
#[test]
fn parsed_lists_are_made_at_their_length() {
    let services = br#"{"services":[{"uid":"u1","name":"web","cluster-ip-address":"10.96.0.1",
        "external-ip-address":["192.0.2.1"],"load-balancer-source-ranges":["10.0.0.0/8"],
        "endpoints":["p1"],"service-ports":[{"port":80,"name":"http"}]}]}"#;
    let Item::Service(s) = &parse::container_body(Kind::Service, services).unwrap()[0] else {
        panic!("a service")
    };
    assert_eq!(s.service_ports.capacity(), 1);
    assert_eq!(s.external_ips.capacity(), 1);
    assert_eq!(s.load_balancer_source_ranges.capacity(), 1);
    assert_eq!(s.endpoints.as_ref().map(Vec::capacity), Some(1));
    let endpoints = br#"{"endpoints":[{"uid":"e1","name":"web",
        "endpoint-addresses":[{"ip-address":"10.1.0.1"},{"ip-address":"10.1.0.2"}],
        "endpoint-ports":[{"port":8080,"name":"http"}]}]}"#;
    let Item::Endpoints(e) = &parse::container_body(Kind::Endpoints, endpoints).unwrap()[0] else {
        panic!("an endpoints object")
    };
    assert_eq!(e.endpoint_addresses.capacity(), 2);
    assert_eq!(e.endpoint_ports.capacity(), 1);
}

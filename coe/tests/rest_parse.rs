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
    let entry = |i: usize| {
        format!(
            r#"{{"uid":"u{i}","name":"s{i}","cluster-ip-address":"10.96.{}.{}","service-ports":[{{"port":80}}]}}"#,
            i / 250,
            i % 250 + 1
        )
    };
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

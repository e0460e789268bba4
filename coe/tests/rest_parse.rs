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
    ] {
        let err = parse::container_body(Kind::Service, body).unwrap_err();
        let text = format!("{err:?} {err}");
        assert!(text.contains("more than once"), "{text}");
        assert!(text.contains(path), "{path}: {text}");
    }
}

//! Reading COE JSON bodies into validated [`Item`]s.
//!
//! Accepts what OpenDaylight's COE watcher sends and what the design document shows:
//! keys with a module prefix (`service:uid`, `pod:…`, `k8s-node:…`) or none; unknown members
//! (such as `cluster-id`) ignored; numbers as JSON numbers or numeric strings; an empty string
//! for an absent address (the watcher's Go `net.IP(nil)`); and `0` for an absent node port.
//! Every error names the field it is about, e.g. `services[u1].service-ports[0].port`.

use std::net::IpAddr;
use std::sync::Arc;

use super::error::{RequestError, excerpt};

mod plain;
mod stream;
mod tree;
use super::types::{
    EndpointAddress, EndpointPort, Endpoints, Interface, Item, K8sNode, Kind, NetworkType, Pod,
    Protocol, Service, ServicePort,
};
use tree::{Json, Object};

/// Module prefixes stripped from member names.
const PREFIXES: [&str; 3] = ["service:", "pod:", "k8s-node:"];

/// Parses the body of a request on a container: the container itself
/// (`{"service:service-information":{"services":[…]}}`) or its list (`{"services":[…]}`).
///
/// The list is read one entry at a time ([`stream`]): each entry becomes a JSON tree, is
/// checked and turned into an [`Item`], and its tree is dropped before the next is read, so a
/// bulk load never holds a tree of the whole body (about ten times the body's size). Plain
/// JSON, what clients send, is read without serde ([`plain`]), with the same result.
pub fn container_body(kind: Kind, body: &[u8]) -> Result<Vec<Item>, RequestError> {
    stream::container(kind, body)
}

/// Parses the body of a PUT on the whole datastore (`/restconf/config`): an object whose
/// members are the four containers (`{"service:service-information":{"services":[…]},
/// "service:endpoints-info":{…},"pod:coe":{…},"k8s-node:k8s-nodes-info":{…}}`), each read as
/// [`container_body`] reads one. Every container must be there, since the PUT replaces each
/// (an empty list empties it); a member that is not a container is an error.
pub fn datastore_body(body: &[u8]) -> Result<Vec<(Kind, Vec<Item>)>, RequestError> {
    stream::datastore(body)
}

/// Parses the body of a request on one list item: `{"service:services":[{…}]}` (the list,
/// holding exactly this item) or `{"service:services":{…}}`. A missing uid takes the URL's;
/// a different one is an error.
pub fn item_body(kind: Kind, uid: &str, body: &[u8]) -> Result<Item, RequestError> {
    let top = read_object(body)?;
    let value = top.get(kind.list()).ok_or_else(|| {
        RequestError::malformed(format!("expected member `{}`", kind.qualified_list()))
    })?;
    let item = match value {
        Json::Array(items) if items.len() == 1 => &items[0],
        Json::Array(items) => {
            return Err(RequestError::invalid(
                kind.list(),
                format!("expected exactly one item, got {}", items.len()),
            ));
        }
        other => other,
    };
    item_value(kind, item, Some(uid), 0)
}

fn read_object(body: &[u8]) -> Result<Object<'_>, RequestError> {
    let value = Json::parse(body, prefix_len)
        .map_err(|e| RequestError::malformed(format!("body is not JSON: {e}")))?;
    no_repeated_members(&value, &String::new)?;
    match value {
        Json::Object(map) => Ok(map),
        _ => Err(RequestError::malformed("body must be a JSON object")),
    }
}

/// A member name without its module prefix.
fn bare(key: &str) -> &str {
    key.get(prefix_len(key)..).unwrap_or(key)
}

/// How long a member name's module prefix is (0: none).
fn prefix_len(key: &str) -> usize {
    PREFIXES
        .iter()
        .find(|p| key.starts_with(*p))
        .map_or(0, |p| p.len())
}

/// Refuses an object that gives a member twice: under one name, or once with a module prefix
/// and once without (or under two prefixes). The path of a value is only spelled out for an
/// error, so a valid body costs no path strings.
fn no_repeated_members(value: &Json<'_>, path: &dyn Fn() -> String) -> Result<(), RequestError> {
    match value {
        Json::Object(map) => {
            if let Some(name) = repeated(map) {
                return Err(RequestError::invalid(
                    join(&path(), name),
                    "member given more than once",
                ));
            }
            for (_, name, value) in map.iter() {
                if value.is_compound() {
                    no_repeated_members(value, &|| join(&path(), name))?;
                }
            }
        }
        Json::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                if v.is_compound() {
                    no_repeated_members(v, &|| format!("{}[{i}]", path()))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A member name (without its prefix) that `map` gives more than once, if any: the first
/// repeat for a COE-sized object, compared pairwise; the least such name for a longer one,
/// found by sorting (so a hostile object costs n log n, not n²).
fn repeated<'o>(map: &'o Object<'_>) -> Option<&'o str> {
    const PAIRWISE: usize = 16;
    if map.len() <= PAIRWISE {
        let mut earlier: [&str; PAIRWISE] = [""; PAIRWISE];
        for (i, (_, name, _)) in map.iter().enumerate() {
            if earlier[..i].contains(&name) {
                return Some(name);
            }
            earlier[i] = name;
        }
        return None;
    }
    let mut names: Vec<&str> = map.iter().map(|(_, name, _)| name).collect();
    names.sort_unstable();
    names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Parses one list entry. `url_uid` is the key from the URL, if any; `index` names the entry
/// in errors until its uid is known.
fn item_value(
    kind: Kind,
    value: &Json<'_>,
    url_uid: Option<&str>,
    index: usize,
) -> Result<Item, RequestError> {
    let obj = value.as_object().ok_or_else(|| {
        RequestError::invalid(format!("{}[{index}]", kind.list()), "expected an object")
    })?;
    let unnamed = Fields {
        obj,
        at: At::Index(kind, index),
    };
    let mut uid = unnamed.str("uid")?;
    match url_uid {
        Some(url) if uid.is_empty() => uid = url,
        Some(url) if uid != url => {
            return Err(RequestError::invalid(
                kind.item_name(url) + ".uid",
                format!("`{}` differs from the key in the URL", excerpt(uid)),
            ));
        }
        _ => {}
    }
    if check_uid(uid, "").is_err() {
        check_uid(uid, &unnamed.at("uid"))?;
    }
    let f = Fields {
        obj,
        at: At::Item(kind, uid),
    };
    Ok(match kind {
        Kind::Service => Item::Service(Arc::new(service(&f, uid.to_owned())?)),
        Kind::Endpoints => Item::Endpoints(Arc::new(endpoints(&f, uid.to_owned())?)),
        Kind::Pod => Item::Pod(pod(&f, uid.to_owned())?),
        Kind::Node => Item::Node(node(&f, uid.to_owned())?),
    })
}

/// Checks a key: non-empty, at most 253 characters of `[A-Za-z0-9._-]`.
pub fn check_uid(uid: &str, path: &str) -> Result<(), RequestError> {
    let ok = !uid.is_empty()
        && uid.len() <= 253
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(RequestError::invalid(
            path,
            format!(
                "`{}` is not a valid key: expected 1 to 253 of A-Z a-z 0-9 . _ -",
                excerpt(uid)
            ),
        ))
    }
}

fn service(f: &Fields<'_>, uid: String) -> Result<Service, RequestError> {
    // Every list is made at its length: the store keeps these very values (a list grown by
    // pushing keeps room for four, about 200 bytes a service or endpoints object left idle).
    let ports = f.list("service-ports")?;
    let mut service_ports = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        service_ports.push(service_port(&f.child("service-ports", i, p)?)?);
    }
    let endpoints = match f.get("endpoints") {
        None => None,
        Some(_) => {
            let list = f.list("endpoints")?;
            let mut uids = Vec::with_capacity(list.len());
            for (i, v) in list.iter().enumerate() {
                let path = || format!("{}[{i}]", f.at("endpoints"));
                let pod = v
                    .as_str()
                    .ok_or_else(|| RequestError::invalid(path(), "expected a pod uid"))?;
                if check_uid(pod, "").is_err() {
                    check_uid(pod, &path())?;
                }
                uids.push(pod.to_string());
            }
            Some(uids)
        }
    };
    let external_traffic_policy = match f.str("external-traffic-policy")? {
        "" | "Cluster" => None,
        "Local" => Some("Local".to_string()),
        other => {
            return Err(RequestError::invalid(
                f.at("external-traffic-policy"),
                format!("`{}`: expected Cluster or Local", excerpt(other)),
            ));
        }
    };
    // As the API server: only a service that keeps outside traffic on nodes with endpoints
    // has load balancers probe its nodes.
    let health_check_node_port = f.port("health-check-node-port")?;
    if health_check_node_port.is_some() && external_traffic_policy.is_none() {
        return Err(RequestError::invalid(
            f.at("health-check-node-port"),
            "needs external-traffic-policy Local",
        ));
    }
    let (cluster_ip, cluster_ips) = cluster_ips(f)?;
    Ok(Service {
        uid,
        name: f.name("name")?,
        network_ns: f.name("network-NS")?,
        cluster_ip,
        cluster_ips,
        external_ips: f.ips("external-ip-address")?,
        load_balancer_ip: f.ip("load-balancer-IP")?,
        ingress_ips: f.ips("ingress-ip-address")?,
        service_ports,
        endpoints,
        load_balancer_source_ranges: f.nets("load-balancer-source-ranges")?,
        external_traffic_policy,
        health_check_node_port,
    })
}

/// `cluster-ip-address` and svcflow's `cluster-ip-addresses` (`spec.clusterIPs`), checked as
/// the API server checks a dual-stack service's: at most one address of each family, the
/// first being `cluster-ip-address` when both are given (and becoming it when it is not).
fn cluster_ips(f: &Fields<'_>) -> Result<(Option<IpAddr>, Vec<IpAddr>), RequestError> {
    let primary = f.ip("cluster-ip-address")?;
    let all = f.ips("cluster-ip-addresses")?;
    let at = || f.at("cluster-ip-addresses");
    if all.len() > 2 || (all.len() == 2 && all[0].is_ipv4() == all[1].is_ipv4()) {
        return Err(RequestError::invalid(
            at(),
            "at most two addresses, one IPv4 and one IPv6",
        ));
    }
    match (primary, all.first()) {
        (Some(primary), Some(first)) if primary != *first => Err(RequestError::invalid(
            at(),
            format!(
                "its first address must be cluster-ip-address {primary} (as clusterIPs[0] is \
                 clusterIP), not {first}"
            ),
        )),
        (primary, first) => Ok((primary.or(first.copied()), all)),
    }
}

fn service_port(f: &Fields<'_>) -> Result<ServicePort, RequestError> {
    let port = f
        .port("port")?
        .ok_or_else(|| RequestError::invalid(f.at("port"), "required"))?;
    let target_port = match f.get("target-port") {
        None | Some(Json::Null) => String::new(),
        // 0 (or "0", as Go prints an unset IntOrString) means the same as `port`.
        Some(n) if n.as_u64() == Some(0) => String::new(),
        Some(n) if n.is_number() => match f.port("target-port")? {
            Some(p) => p.to_string(),
            None => String::new(),
        },
        Some(Json::Str(s)) if s.is_empty() || s == "0" => String::new(),
        Some(Json::Str(s)) if s.bytes().all(|b| b.is_ascii_digit()) => {
            match f.port("target-port")? {
                Some(p) => p.to_string(),
                None => String::new(),
            }
        }
        Some(Json::Str(s)) => {
            let ok = s.len() <= 63
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && s.bytes().any(|b| b.is_ascii_alphabetic());
            if !ok {
                return Err(RequestError::invalid(
                    f.at("target-port"),
                    format!("`{}` is neither a port number nor a port name", excerpt(s)),
                ));
            }
            s.to_string()
        }
        Some(_) => {
            return Err(RequestError::invalid(
                f.at("target-port"),
                "expected a port number or name",
            ));
        }
    };
    Ok(ServicePort {
        name: f.name("name")?,
        protocol: f.protocol("protocol")?.unwrap_or_default(),
        port,
        target_port,
        // The watcher sends 0 for "no node port".
        node_port: match f.int("node-port")? {
            None | Some(0) => None,
            Some(_) => f.port("node-port")?,
        },
    })
}

fn endpoints(f: &Fields<'_>, uid: String) -> Result<Endpoints, RequestError> {
    // Lists at their length, as in `service`.
    let addresses = f.list("endpoint-addresses")?;
    let mut endpoint_addresses = Vec::with_capacity(addresses.len());
    for (i, a) in addresses.iter().enumerate() {
        let a = f.child("endpoint-addresses", i, a)?;
        endpoint_addresses.push(EndpointAddress {
            ip_address: a
                .ip("ip-address")?
                .ok_or_else(|| RequestError::invalid(a.at("ip-address"), "required"))?,
            host_name: a.string("host-name")?,
            node_name: a.name("node-name")?,
            weight: match a.int("weight")? {
                None => None,
                Some(w) => Some(u16::try_from(w).map_err(|_| {
                    RequestError::invalid(a.at("weight"), format!("{w} is out of range 0 to 65535"))
                })?),
            },
        });
    }
    let ports = f.list("endpoint-ports")?;
    let mut endpoint_ports = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let p = f.child("endpoint-ports", i, p)?;
        endpoint_ports.push(EndpointPort {
            name: p.name("name")?,
            port: p
                .port("port")?
                .ok_or_else(|| RequestError::invalid(p.at("port"), "required"))?,
            protocol: p.protocol("protocol")?,
        });
    }
    Ok(Endpoints {
        uid,
        name: f.name("name")?,
        network_ns: f.name("network-NS")?,
        endpoint_addresses,
        endpoint_ports,
    })
}

fn pod(f: &Fields<'_>, uid: String) -> Result<Pod, RequestError> {
    let port_mac = match f.str("port-mac-address")? {
        "" => None,
        s => Some(
            s.parse::<netvirt::model::MacAddr>()
                .map_err(|e| RequestError::invalid(f.at("port-mac-address"), e.reason))?
                .to_string(),
        ),
    };
    let mut interface: Vec<Interface> = Vec::new();
    for (i, v) in f.list("interface")?.iter().enumerate() {
        let x = f.child("interface", i, v)?;
        let iface_uid = x.string("uid")?;
        if check_uid(&iface_uid, "").is_err() {
            check_uid(&iface_uid, &x.at("uid"))?;
        }
        let network_type = match x.str("network-type")? {
            "" => None,
            s => Some(match s.to_ascii_uppercase().as_str() {
                "FLAT" => NetworkType::Flat,
                "VLAN" => NetworkType::Vlan,
                "VXLAN" => NetworkType::Vxlan,
                "GRE" => NetworkType::Gre,
                _ => {
                    return Err(RequestError::invalid(
                        x.at("network-type"),
                        format!("`{}`: expected FLAT, VLAN, VXLAN or GRE", excerpt(s)),
                    ));
                }
            }),
        };
        let segmentation_id = match x.int("segmentation-id")? {
            None => None,
            Some(n) => Some(u32::try_from(n).map_err(|_| {
                RequestError::invalid(
                    x.at("segmentation-id"),
                    format!("{n} is out of range 0 to 4294967295"),
                )
            })?),
        };
        let ip_address = x.ip("ip-address")?;
        // A dual-stack interface is listed once per family (as Kubernetes lists
        // `status.podIPs`): the same uid again only with an address of the other family.
        let other_family = |i: &Interface| match (i.ip_address, ip_address) {
            (Some(a), Some(b)) => a.is_ipv4() != b.is_ipv4(),
            _ => false,
        };
        let same_uid: Vec<&Interface> = interface.iter().filter(|i| i.uid == iface_uid).collect();
        if same_uid.len() > 1 || same_uid.iter().any(|i| !other_family(i)) {
            return Err(RequestError::invalid(
                x.at("uid"),
                "interface uid given twice (a dual-stack interface is listed once per IP \
                 family, each time with an address)",
            ));
        }
        interface.push(Interface {
            uid: iface_uid,
            ip_address,
            network_id: x.string("network-id")?,
            network_type,
            segmentation_id,
        });
    }
    Ok(Pod {
        uid,
        name: f.name("name")?,
        host_ip: f.ip("host-ip-address")?,
        network_ns: f.name("network-NS")?,
        port_mac,
        interface,
    })
}

fn node(f: &Fields<'_>, uid: String) -> Result<K8sNode, RequestError> {
    // One CIDR, or a dual-stack pair separated by a comma, at most one of each family.
    let text = f.string("pod-cidr")?;
    let mut pod_cidrs: Vec<ipnet::IpNet> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let net: ipnet::IpNet = part.parse().map_err(|_| {
            RequestError::invalid(
                f.at("pod-cidr"),
                format!(
                    "`{}` is not a CIDR like 10.244.1.0/24 (or a pair like \
                     10.244.1.0/24,fd00:10:244:1::/64)",
                    excerpt(part)
                ),
            )
        })?;
        if pod_cidrs.iter().any(|c| {
            matches!(
                (c, &net),
                (ipnet::IpNet::V4(_), ipnet::IpNet::V4(_))
                    | (ipnet::IpNet::V6(_), ipnet::IpNet::V6(_))
            )
        }) {
            return Err(RequestError::invalid(
                f.at("pod-cidr"),
                format!("`{}` has two CIDRs of one IP family", excerpt(&text)),
            ));
        }
        pod_cidrs.push(net);
    }
    Ok(K8sNode {
        uid,
        host_name: f.name("host-name")?,
        internal_ip: f.ip("internal-ip-address")?,
        external_ip: f.ip("external-ip-address")?,
        pod_cidrs,
    })
}

/// Where an object is, spelled out only for an error message.
enum At<'a> {
    /// Entry `i` of a request's list of items of a kind, its uid not yet known.
    Index(Kind, usize),
    /// The item of a kind with this uid.
    Item(Kind, &'a str),
    /// Entry `i` of list `key` of the object at the first place.
    Entry(&'a At<'a>, &'a str, usize),
}

impl At<'_> {
    fn path(&self) -> String {
        match self {
            At::Index(kind, i) => format!("{}[{i}]", kind.list()),
            At::Item(kind, uid) => kind.item_name(uid),
            At::Entry(parent, key, i) => format!("{}[{i}]", join(&parent.path(), key)),
        }
    }
}

/// Typed access to an object's members, naming `path.member` in errors.
struct Fields<'a> {
    obj: &'a Object<'a>,
    at: At<'a>,
}

impl<'a> Fields<'a> {
    fn path(&self) -> String {
        self.at.path()
    }

    fn at(&self, key: &str) -> String {
        join(&self.path(), key)
    }

    fn get(&self, key: &str) -> Option<&'a Json<'a>> {
        // With or without a module prefix (a body never has both: [`no_repeated_members`]
        // refuses it).
        self.obj.get(key)
    }

    /// The `i`th entry of list `key`, as fields.
    fn child<'b>(
        &'b self,
        key: &'b str,
        i: usize,
        v: &'a Json<'a>,
    ) -> Result<Fields<'b>, RequestError> {
        let obj = v.as_object().ok_or_else(|| {
            RequestError::invalid(format!("{}[{i}]", self.at(key)), "expected an object")
        })?;
        Ok(Fields {
            obj,
            at: At::Entry(&self.at, key, i),
        })
    }

    /// A string; absent or null is empty.
    fn str(&self, key: &str) -> Result<&'a str, RequestError> {
        match self.get(key) {
            None | Some(Json::Null) => Ok(""),
            Some(Json::Str(s)) => Ok(s),
            Some(_) => Err(RequestError::invalid(self.at(key), "expected a string")),
        }
    }

    /// A string; absent or null is empty.
    fn string(&self, key: &str) -> Result<String, RequestError> {
        self.str(key).map(str::to_owned)
    }

    /// A Kubernetes-style name: at most 253 printable characters without `/`: no control
    /// (Unicode Cc) or format (Cf: bidirectional overrides, zero-width characters, the BOM)
    /// character, which would make two names that print alike differ.
    fn name(&self, key: &str) -> Result<String, RequestError> {
        let s = self.string(key)?;
        // Printable ASCII but `/` is valid as it is (no control, whitespace or format
        // character is in that range): most names, checked a byte at a time, where the
        // Unicode check of every character was most of a name's cost in a bulk PUT.
        let plain = s.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
        if s.len() > 253
            || !plain
                && s.chars()
                    .any(|c| c == '/' || c.is_control() || c.is_whitespace() || is_format(c))
        {
            return Err(RequestError::invalid(
                self.at(key),
                format!("`{}` is not a valid name", excerpt(&s)),
            ));
        }
        Ok(s)
    }

    /// A list; absent or null is empty.
    fn list(&self, key: &str) -> Result<&'a [Json<'a>], RequestError> {
        match self.get(key) {
            None | Some(Json::Null) => Ok(&[]),
            Some(Json::Array(a)) => Ok(a),
            Some(_) => Err(RequestError::invalid(self.at(key), "expected a list")),
        }
    }

    /// An address; absent, null or `""` is none.
    fn ip(&self, key: &str) -> Result<Option<IpAddr>, RequestError> {
        match self.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Str(s)) if s.is_empty() => Ok(None),
            Some(Json::Str(s)) => s.parse().map(Some).map_err(|_| {
                RequestError::invalid(
                    self.at(key),
                    format!("`{}` is not an IP address", excerpt(s)),
                )
            }),
            Some(_) => Err(RequestError::invalid(
                self.at(key),
                "expected an IP address",
            )),
        }
    }

    /// A leaf-list of address ranges (`ADDRESS/PREFIX`), without repeats.
    fn nets(&self, key: &str) -> Result<Vec<ipnet::IpNet>, RequestError> {
        let list = self.list(key)?;
        let mut nets = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let at = || format!("{}[{i}]", self.at(key));
            let s = v
                .as_str()
                .ok_or_else(|| RequestError::invalid(at(), "expected ADDRESS/PREFIX"))?;
            let net: ipnet::IpNet = s.parse().map_err(|_| {
                RequestError::invalid(
                    at(),
                    format!("`{}` is not an address range (ADDRESS/PREFIX)", excerpt(s)),
                )
            })?;
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
        Ok(nets)
    }

    /// A leaf-list of addresses (a single string is taken as a list of one); `""` is skipped.
    fn ips(&self, key: &str) -> Result<Vec<IpAddr>, RequestError> {
        let values: &[Json<'_>] = match self.get(key) {
            None | Some(Json::Null) => &[],
            Some(Json::Array(a)) => a,
            Some(v @ Json::Str(_)) => std::slice::from_ref(v),
            Some(_) => {
                return Err(RequestError::invalid(
                    self.at(key),
                    "expected a list of IP addresses",
                ));
            }
        };
        let mut ips = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            let at = || format!("{}[{i}]", self.at(key));
            match v {
                Json::Str(s) if s.is_empty() => {}
                Json::Str(s) => {
                    let ip = s.parse().map_err(|_| {
                        RequestError::invalid(
                            at(),
                            format!("`{}` is not an IP address", excerpt(s)),
                        )
                    })?;
                    if !ips.contains(&ip) {
                        ips.push(ip);
                    }
                }
                _ => return Err(RequestError::invalid(at(), "expected an IP address")),
            }
        }
        Ok(ips)
    }

    /// An integer, as a JSON number or a decimal string.
    fn int(&self, key: &str) -> Result<Option<i64>, RequestError> {
        let bad = || RequestError::invalid(self.at(key), "expected an integer");
        match self.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(n) if n.is_number() => n.as_i64().map(Some).ok_or_else(bad),
            Some(Json::Str(s)) => s.trim().parse::<i64>().map(Some).map_err(|_| bad()),
            Some(_) => Err(bad()),
        }
    }

    /// A port number, 1 to 65535.
    fn port(&self, key: &str) -> Result<Option<u16>, RequestError> {
        match self.int(key)? {
            None => Ok(None),
            Some(n) => match u16::try_from(n) {
                Ok(p) if p != 0 => Ok(Some(p)),
                _ => Err(RequestError::invalid(
                    self.at(key),
                    format!("port {n} is out of range 1 to 65535"),
                )),
            },
        }
    }

    /// A protocol name, case-insensitive.
    fn protocol(&self, key: &str) -> Result<Option<Protocol>, RequestError> {
        match self.str(key)? {
            "" => Ok(None),
            s => s.parse().map(Some).map_err(|_| {
                RequestError::invalid(
                    self.at(key),
                    format!(
                        "unknown protocol `{}`: expected TCP, UDP or SCTP",
                        excerpt(s)
                    ),
                )
            }),
        }
    }
}

/// Whether `c` is a Unicode format character (general category Cf), per Unicode 15.1.
pub(crate) fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

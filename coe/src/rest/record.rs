//! The write-ahead log's records ([`super::durable`]): a change's effects, or a snapshot of
//! the store, encoded and decoded. Pure: no I/O.
//!
//! Records are written in a compact binary form. Logs written before 2026-12-07 hold JSON
//! records (`{"effects":{"seq":N,"effects":[…]}}`, `{"snapshot":{"seq":N,"store":{…}}}`),
//! which are still read, so a log may hold both; a record's first byte tells them apart
//! (JSON's is `{`). Writing and syncing a record is on the path of every write's reply, and
//! a 30,000-service container PUT was about 6 MB of JSON, whose write and `fdatasync` took
//! 7–66 ms on the development host and its encoding 10–20 ms; in this form it is about a
//! quarter of that size (`docs/performance.md`).
//!
//! The binary form. Every integer is an unsigned LEB128 varint; a string is its length, then
//! its UTF-8 bytes; an `Option` is `0`, or `1` and the value; a list is its length, then its
//! elements; an address is `4` and four bytes or `6` and sixteen; a CIDR is its address, then
//! its prefix length; a protocol (`0` TCP, `1` UDP, `2` SCTP) or a network type (`0` FLAT,
//! `1` VLAN, `2` VXLAN, `3` GRE) is one byte. A record is:
//!
//! - its form: `1` for effects, `2` for a snapshot (a later form takes a new number, which
//!   this code refuses by name rather than misreads);
//! - its sequence number;
//! - effects: the list of effects, each `0` and a kind (clear), `1` and an item (upsert), or
//!   `2`, a kind and a uid (remove);
//! - a snapshot: the list of ELAN ids (namespace, id), then the list of items.
//!
//! A kind is `0` service, `1` endpoints, `2` pod, `3` node; an item is its kind, then its
//! fields in the order [`super::types`] declares them. Nothing follows the record.
//!
//! Decoding is for bytes whose checksum matched, but it trusts nothing: every length is
//! checked against the bytes left and every value against its type, any error is a
//! [`DecodeError`] naming the byte, and what it allocates ahead is bounded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;
use serde::Deserialize;

use super::store::{Effect, Store};
use super::types::{
    EndpointAddress, EndpointPort, Endpoints, Interface, Item, K8sNode, Kind, NetworkType, Pod,
    Protocol, Service, ServicePort,
};

/// The first byte of an effects record in the binary form.
const EFFECTS: u8 = 1;
/// The first byte of a snapshot record in the binary form.
const SNAPSHOT: u8 = 2;

/// Kinds, protocols and network types by their byte (the encoders' matches give the same
/// bytes; the round-trip tests hold them to it).
const KINDS: [Kind; 4] = [Kind::Service, Kind::Endpoints, Kind::Pod, Kind::Node];
const PROTOCOLS: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];
const NETWORK_TYPES: [NetworkType; 4] = [
    NetworkType::Flat,
    NetworkType::Vlan,
    NetworkType::Vxlan,
    NetworkType::Gre,
];

/// How many elements a list's length may reserve room for ahead of reading them.
const RESERVE_MAX: usize = 1 << 16;

/// Bytes to reserve per effect when encoding: an endpoints object with two addresses is about
/// 60 bytes in this form (a little more with Kubernetes' 36-character uids), a service about
/// as much; the buffer grows past it when needed.
pub const BYTES_PER_EFFECT: usize = 96;

/// A record as read back.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// A change's effects.
    Effects {
        /// Its sequence number.
        seq: u64,
        /// What it did.
        effects: Vec<Effect>,
    },
    /// The whole store.
    Snapshot {
        /// The sequence number of the last change it holds.
        seq: u64,
        /// The store.
        store: Box<Store>,
    },
}

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A binary record is malformed.
    #[error("byte {offset}: {reason}")]
    Binary {
        /// Where, from the record's first byte.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A JSON record (written before 2026-12-07) is malformed.
    #[error("{0}")]
    Json(String),
}

/// The JSON form, as logs written before the binary form hold it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum JsonRecord {
    Effects { seq: u64, effects: Vec<Effect> },
    Snapshot { seq: u64, store: Box<Store> },
}

/// Appends a change's record to `out`.
pub fn encode_effects(out: &mut Vec<u8>, seq: u64, effects: &[Effect]) {
    out.push(EFFECTS);
    varint(out, seq);
    len(out, effects.len());
    for effect in effects {
        match effect {
            Effect::Clear(kind) => {
                out.push(0);
                out.push(kind_byte(*kind));
            }
            Effect::Upsert(item) => {
                out.push(1);
                encode_item(out, item);
            }
            Effect::Remove(kind, uid) => {
                out.push(2);
                out.push(kind_byte(*kind));
                string(out, uid);
            }
        }
    }
}

/// Appends a snapshot of `store` to `out`.
pub fn encode_snapshot(out: &mut Vec<u8>, seq: u64, store: &Store) {
    out.push(SNAPSHOT);
    varint(out, seq);
    len(out, store.elans.len());
    for (namespace, id) in &store.elans {
        string(out, namespace);
        varint(out, u64::from(*id));
    }
    let items = store.services.len() + store.endpoints.len() + store.pods.len() + store.nodes.len();
    len(out, items);
    for service in store.services.values() {
        out.push(kind_byte(Kind::Service));
        encode_service(out, service);
    }
    for endpoints in store.endpoints.values() {
        out.push(kind_byte(Kind::Endpoints));
        encode_endpoints(out, endpoints);
    }
    for pod in store.pods.values() {
        out.push(kind_byte(Kind::Pod));
        encode_pod(out, pod);
    }
    for node in store.nodes.values() {
        out.push(kind_byte(Kind::Node));
        encode_node(out, node);
    }
}

/// Reads a record in either form.
pub fn decode(payload: &[u8]) -> Result<Record, DecodeError> {
    match payload.first() {
        Some(&EFFECTS) | Some(&SNAPSHOT) => {
            let mut reader = Reader {
                bytes: payload,
                at: 0,
            };
            let record = reader.record()?;
            if reader.at != payload.len() {
                return Err(reader.error("bytes after the record's end"));
            }
            Ok(record)
        }
        Some(b'{' | b' ' | b'\t' | b'\n' | b'\r') => {
            match serde_json::from_slice(payload).map_err(|e| DecodeError::Json(e.to_string()))? {
                JsonRecord::Effects { seq, effects } => Ok(Record::Effects { seq, effects }),
                JsonRecord::Snapshot { seq, store } => Ok(Record::Snapshot { seq, store }),
            }
        }
        Some(_) => Err(DecodeError::Binary {
            offset: 0,
            reason: "an unknown record form (written by a newer svcflow?)",
        }),
        None => Err(DecodeError::Binary {
            offset: 0,
            reason: "an empty record",
        }),
    }
}

fn kind_byte(kind: Kind) -> u8 {
    match kind {
        Kind::Service => 0,
        Kind::Endpoints => 1,
        Kind::Pod => 2,
        Kind::Node => 3,
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn len(out: &mut Vec<u8>, n: usize) {
    varint(out, n as u64);
}

fn string(out: &mut Vec<u8>, s: &str) {
    len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn strings(out: &mut Vec<u8>, list: &[String]) {
    len(out, list.len());
    for s in list {
        string(out, s);
    }
}

fn ip(out: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(6);
            out.extend_from_slice(&v6.octets());
        }
    }
}

fn ips(out: &mut Vec<u8>, list: &[IpAddr]) {
    len(out, list.len());
    for a in list {
        ip(out, a);
    }
}

fn nets(out: &mut Vec<u8>, list: &[IpNet]) {
    len(out, list.len());
    for net in list {
        ip(out, &net.addr());
        out.push(net.prefix_len());
    }
}

fn option<T>(out: &mut Vec<u8>, value: Option<&T>, each: impl FnOnce(&mut Vec<u8>, &T)) {
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            each(out, v);
        }
    }
}

fn protocol_byte(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 0,
        Protocol::Udp => 1,
        Protocol::Sctp => 2,
    }
}

fn network_type_byte(t: NetworkType) -> u8 {
    match t {
        NetworkType::Flat => 0,
        NetworkType::Vlan => 1,
        NetworkType::Vxlan => 2,
        NetworkType::Gre => 3,
    }
}

fn encode_item(out: &mut Vec<u8>, item: &Item) {
    out.push(kind_byte(item.kind()));
    match item {
        Item::Service(s) => encode_service(out, s),
        Item::Endpoints(e) => encode_endpoints(out, e),
        Item::Pod(p) => encode_pod(out, p),
        Item::Node(n) => encode_node(out, n),
    }
}

fn encode_service(out: &mut Vec<u8>, s: &Service) {
    // Destructured, so that a new field cannot be left out of the log unnoticed.
    let Service {
        uid,
        name,
        network_ns,
        cluster_ip,
        cluster_ips,
        external_ips,
        load_balancer_ip,
        ingress_ips,
        service_ports,
        endpoints,
        external_traffic_policy,
        load_balancer_source_ranges,
        health_check_node_port,
    } = s;
    string(out, uid);
    string(out, name);
    string(out, network_ns);
    option(out, cluster_ip.as_ref(), ip);
    ips(out, cluster_ips);
    ips(out, external_ips);
    option(out, load_balancer_ip.as_ref(), ip);
    ips(out, ingress_ips);
    len(out, service_ports.len());
    for port in service_ports {
        let ServicePort {
            name,
            protocol,
            port,
            target_port,
            node_port,
        } = port;
        string(out, name);
        out.push(protocol_byte(*protocol));
        varint(out, u64::from(*port));
        string(out, target_port);
        option(out, node_port.as_ref(), |o, p| varint(o, u64::from(*p)));
    }
    option(out, endpoints.as_ref(), |o, list| strings(o, list));
    option(out, external_traffic_policy.as_ref(), |o, s| string(o, s));
    nets(out, load_balancer_source_ranges);
    option(out, health_check_node_port.as_ref(), |o, p| {
        varint(o, u64::from(*p));
    });
}

fn encode_endpoints(out: &mut Vec<u8>, e: &Endpoints) {
    let Endpoints {
        uid,
        name,
        network_ns,
        endpoint_addresses,
        endpoint_ports,
    } = e;
    string(out, uid);
    string(out, name);
    string(out, network_ns);
    len(out, endpoint_addresses.len());
    for address in endpoint_addresses {
        let EndpointAddress {
            ip_address,
            host_name,
            node_name,
            weight,
        } = address;
        ip(out, ip_address);
        string(out, host_name);
        string(out, node_name);
        option(out, weight.as_ref(), |o, w| varint(o, u64::from(*w)));
    }
    len(out, endpoint_ports.len());
    for port in endpoint_ports {
        let EndpointPort {
            name,
            port,
            protocol,
        } = port;
        string(out, name);
        varint(out, u64::from(*port));
        option(out, protocol.as_ref(), |o, p| o.push(protocol_byte(*p)));
    }
}

fn encode_pod(out: &mut Vec<u8>, p: &Pod) {
    let Pod {
        uid,
        name,
        host_ip,
        network_ns,
        port_mac,
        interface,
    } = p;
    string(out, uid);
    string(out, name);
    option(out, host_ip.as_ref(), ip);
    string(out, network_ns);
    option(out, port_mac.as_ref(), |o, s| string(o, s));
    len(out, interface.len());
    for i in interface {
        let Interface {
            uid,
            ip_address,
            network_id,
            network_type,
            segmentation_id,
        } = i;
        string(out, uid);
        option(out, ip_address.as_ref(), ip);
        string(out, network_id);
        option(out, network_type.as_ref(), |o, t| {
            o.push(network_type_byte(*t))
        });
        option(out, segmentation_id.as_ref(), |o, id| {
            varint(o, u64::from(*id));
        });
    }
}

fn encode_node(out: &mut Vec<u8>, n: &K8sNode) {
    let K8sNode {
        uid,
        host_name,
        internal_ip,
        external_ip,
        pod_cidrs,
    } = n;
    string(out, uid);
    string(out, host_name);
    option(out, internal_ip.as_ref(), ip);
    option(out, external_ip.as_ref(), ip);
    nets(out, pod_cidrs);
}

/// Reads the binary form.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

type Read<T> = Result<T, DecodeError>;

impl<'a> Reader<'a> {
    fn error(&self, reason: &'static str) -> DecodeError {
        DecodeError::Binary {
            offset: self.at,
            reason,
        }
    }

    fn byte(&mut self) -> Read<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| self.error("the record ends early"))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Read<&'a [u8]> {
        let bytes = self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end))
            .ok_or_else(|| self.error("the record ends early"))?;
        self.at += n;
        Ok(bytes)
    }

    fn varint(&mut self) -> Read<u64> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                self.at = start;
                return Err(self.error("a number larger than 64 bits"));
            }
            value |= part << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        self.at = start;
        Err(self.error("a number larger than 64 bits"))
    }

    fn u16(&mut self) -> Read<u16> {
        let start = self.at;
        let v = self.varint()?;
        u16::try_from(v).map_err(|_| DecodeError::Binary {
            offset: start,
            reason: "a port or weight above 65535",
        })
    }

    fn u32(&mut self) -> Read<u32> {
        let start = self.at;
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| DecodeError::Binary {
            offset: start,
            reason: "a number above 32 bits",
        })
    }

    /// A list's length: at most the bytes left, since every element takes at least one.
    fn len(&mut self) -> Read<usize> {
        let start = self.at;
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.bytes.len() - self.at => Ok(n),
            _ => Err(DecodeError::Binary {
                offset: start,
                reason: "a length larger than the rest of the record",
            }),
        }
    }

    fn string(&mut self) -> Read<String> {
        let n = self.len()?;
        let start = self.at;
        let bytes = self.take(n)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(DecodeError::Binary {
                offset: start,
                reason: "a string that is not UTF-8",
            }),
        }
    }

    fn list<T>(&mut self, mut each: impl FnMut(&mut Self) -> Read<T>) -> Read<Vec<T>> {
        let n = self.len()?;
        let mut list = Vec::with_capacity(n.min(RESERVE_MAX));
        for _ in 0..n {
            list.push(each(self)?);
        }
        Ok(list)
    }

    fn option<T>(&mut self, each: impl FnOnce(&mut Self) -> Read<T>) -> Read<Option<T>> {
        match self.byte()? {
            0 => Ok(None),
            1 => each(self).map(Some),
            _ => {
                self.at -= 1;
                Err(self.error("an option that is neither 0 nor 1"))
            }
        }
    }

    fn ip(&mut self) -> Read<IpAddr> {
        match self.byte()? {
            4 => {
                let mut octets = [0; 4];
                octets.copy_from_slice(self.take(4)?);
                Ok(IpAddr::V4(Ipv4Addr::from(octets)))
            }
            6 => {
                let mut octets = [0; 16];
                octets.copy_from_slice(self.take(16)?);
                Ok(IpAddr::V6(Ipv6Addr::from(octets)))
            }
            _ => {
                self.at -= 1;
                Err(self.error("an address family that is neither 4 nor 6"))
            }
        }
    }

    fn net(&mut self) -> Read<IpNet> {
        let addr = self.ip()?;
        let prefix = self.byte()?;
        IpNet::new(addr, prefix).map_err(|_| {
            self.at -= 1;
            self.error("a prefix longer than its address")
        })
    }

    /// A value given by its byte: its index in `table`.
    fn tag<T: Copy>(&mut self, table: &[T], reason: &'static str) -> Read<T> {
        let b = self.byte()?;
        table.get(usize::from(b)).copied().ok_or_else(|| {
            self.at -= 1;
            self.error(reason)
        })
    }

    fn kind(&mut self) -> Read<Kind> {
        self.tag(&KINDS, "an unknown kind")
    }

    fn protocol(&mut self) -> Read<Protocol> {
        self.tag(&PROTOCOLS, "an unknown protocol")
    }

    fn network_type(&mut self) -> Read<NetworkType> {
        self.tag(&NETWORK_TYPES, "an unknown network type")
    }

    fn record(&mut self) -> Read<Record> {
        match self.byte()? {
            EFFECTS => {
                let seq = self.varint()?;
                let effects = self.list(Self::effect)?;
                Ok(Record::Effects { seq, effects })
            }
            SNAPSHOT => {
                let seq = self.varint()?;
                let mut store = Store::default();
                let elans = self.len()?;
                for _ in 0..elans {
                    let start = self.at;
                    let (namespace, id) = (self.string()?, self.u32()?);
                    if store.elans.insert(namespace, id).is_some() {
                        return Err(DecodeError::Binary {
                            offset: start,
                            reason: "a namespace whose ELAN id came before",
                        });
                    }
                }
                let items = self.len()?;
                for _ in 0..items {
                    let start = self.at;
                    let item = self.item()?;
                    let uid = item.uid().to_string();
                    let new = match item {
                        Item::Service(s) => store.services.insert(uid, s).is_none(),
                        Item::Endpoints(e) => store.endpoints.insert(uid, e).is_none(),
                        Item::Pod(p) => store.pods.insert(uid, p).is_none(),
                        Item::Node(n) => store.nodes.insert(uid, n).is_none(),
                    };
                    if !new {
                        return Err(DecodeError::Binary {
                            offset: start,
                            reason: "an item whose kind and uid came before",
                        });
                    }
                }
                Ok(Record::Snapshot {
                    seq,
                    store: Box::new(store),
                })
            }
            _ => {
                self.at -= 1;
                Err(self.error("an unknown record form (written by a newer svcflow?)"))
            }
        }
    }

    fn effect(&mut self) -> Read<Effect> {
        match self.byte()? {
            0 => Ok(Effect::Clear(self.kind()?)),
            1 => Ok(Effect::Upsert(self.item()?)),
            2 => Ok(Effect::Remove(self.kind()?, self.string()?)),
            _ => {
                self.at -= 1;
                Err(self.error("an unknown effect"))
            }
        }
    }

    fn item(&mut self) -> Read<Item> {
        Ok(match self.kind()? {
            Kind::Service => Item::Service(Arc::new(self.service()?)),
            Kind::Endpoints => Item::Endpoints(Arc::new(self.endpoints()?)),
            Kind::Pod => Item::Pod(self.pod()?),
            Kind::Node => Item::Node(self.node()?),
        })
    }

    fn service(&mut self) -> Read<Service> {
        Ok(Service {
            uid: self.string()?,
            name: self.string()?,
            network_ns: self.string()?,
            cluster_ip: self.option(Self::ip)?,
            cluster_ips: self.list(Self::ip)?,
            external_ips: self.list(Self::ip)?,
            load_balancer_ip: self.option(Self::ip)?,
            ingress_ips: self.list(Self::ip)?,
            service_ports: self.list(|r| {
                Ok(ServicePort {
                    name: r.string()?,
                    protocol: r.protocol()?,
                    port: r.u16()?,
                    target_port: r.string()?,
                    node_port: r.option(Self::u16)?,
                })
            })?,
            endpoints: self.option(|r| r.list(Self::string))?,
            external_traffic_policy: self.option(Self::string)?,
            load_balancer_source_ranges: self.list(Self::net)?,
            health_check_node_port: self.option(Self::u16)?,
        })
    }

    fn endpoints(&mut self) -> Read<Endpoints> {
        Ok(Endpoints {
            uid: self.string()?,
            name: self.string()?,
            network_ns: self.string()?,
            endpoint_addresses: self.list(|r| {
                Ok(EndpointAddress {
                    ip_address: r.ip()?,
                    host_name: r.string()?,
                    node_name: r.string()?,
                    weight: r.option(Self::u16)?,
                })
            })?,
            endpoint_ports: self.list(|r| {
                Ok(EndpointPort {
                    name: r.string()?,
                    port: r.u16()?,
                    protocol: r.option(Self::protocol)?,
                })
            })?,
        })
    }

    fn pod(&mut self) -> Read<Pod> {
        Ok(Pod {
            uid: self.string()?,
            name: self.string()?,
            host_ip: self.option(Self::ip)?,
            network_ns: self.string()?,
            port_mac: self.option(Self::string)?,
            interface: self.list(|r| {
                Ok(Interface {
                    uid: r.string()?,
                    ip_address: r.option(Self::ip)?,
                    network_id: r.string()?,
                    network_type: r.option(Self::network_type)?,
                    segmentation_id: r.option(Self::u32)?,
                })
            })?,
        })
    }

    fn node(&mut self) -> Read<K8sNode> {
        Ok(K8sNode {
            uid: self.string()?,
            host_name: self.string()?,
            internal_ip: self.option(Self::ip)?,
            external_ip: self.option(Self::ip)?,
            pod_cidrs: self.list(Self::net)?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z0-9.-]{1,12}", "\\PC{0,8}"]
    }

    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(|o| IpAddr::V4(o.into())),
            any::<[u8; 16]>().prop_map(|o| IpAddr::V6(o.into())),
        ]
    }

    fn net() -> impl Strategy<Value = IpNet> {
        (addr(), any::<u8>()).prop_map(|(a, p)| {
            let max = if a.is_ipv4() { 33 } else { 129 };
            IpNet::new(a, p % max).unwrap()
        })
    }

    fn protocol() -> impl Strategy<Value = Protocol> {
        prop_oneof![
            Just(Protocol::Tcp),
            Just(Protocol::Udp),
            Just(Protocol::Sctp)
        ]
    }

    fn few<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Vec<T>> {
        proptest::collection::vec(s, 0..3)
    }

    fn service() -> impl Strategy<Value = Service> {
        let port = (
            text(),
            protocol(),
            any::<u16>(),
            text(),
            any::<Option<u16>>(),
        )
            .prop_map(
                |(name, protocol, port, target_port, node_port)| ServicePort {
                    name,
                    protocol,
                    port,
                    target_port,
                    node_port,
                },
            );
        (
            (text(), text(), text(), proptest::option::of(addr())),
            (
                few(addr()),
                few(addr()),
                proptest::option::of(addr()),
                few(addr()),
            ),
            (
                few(port),
                proptest::option::of(few(text())),
                proptest::option::of(text()),
            ),
            (few(net()), any::<Option<u16>>()),
        )
            .prop_map(
                |(
                    (uid, name, ns, ip),
                    (ips, ext, lb, ingress),
                    (ports, eps, etp),
                    (ranges, hc),
                )| {
                    Service {
                        uid,
                        name,
                        network_ns: ns,
                        cluster_ip: ip,
                        cluster_ips: ips,
                        external_ips: ext,
                        load_balancer_ip: lb,
                        ingress_ips: ingress,
                        service_ports: ports,
                        endpoints: eps,
                        external_traffic_policy: etp,
                        load_balancer_source_ranges: ranges,
                        health_check_node_port: hc,
                    }
                },
            )
    }

    fn endpoints() -> impl Strategy<Value = Endpoints> {
        let address = (addr(), text(), text(), any::<Option<u16>>()).prop_map(
            |(ip_address, host_name, node_name, weight)| EndpointAddress {
                ip_address,
                host_name,
                node_name,
                weight,
            },
        );
        let port = (text(), any::<u16>(), proptest::option::of(protocol())).prop_map(
            |(name, port, protocol)| EndpointPort {
                name,
                port,
                protocol,
            },
        );
        (text(), text(), text(), few(address), few(port)).prop_map(
            |(uid, name, network_ns, endpoint_addresses, endpoint_ports)| Endpoints {
                uid,
                name,
                network_ns,
                endpoint_addresses,
                endpoint_ports,
            },
        )
    }

    fn pod() -> impl Strategy<Value = Pod> {
        let network_type = prop_oneof![
            Just(NetworkType::Flat),
            Just(NetworkType::Vlan),
            Just(NetworkType::Vxlan),
            Just(NetworkType::Gre),
        ];
        let interface = (
            text(),
            proptest::option::of(addr()),
            text(),
            proptest::option::of(network_type),
            any::<Option<u32>>(),
        )
            .prop_map(
                |(uid, ip_address, network_id, network_type, segmentation_id)| Interface {
                    uid,
                    ip_address,
                    network_id,
                    network_type,
                    segmentation_id,
                },
            );
        (
            text(),
            text(),
            proptest::option::of(addr()),
            text(),
            proptest::option::of(text()),
            few(interface),
        )
            .prop_map(
                |(uid, name, host_ip, network_ns, port_mac, interface)| Pod {
                    uid,
                    name,
                    host_ip,
                    network_ns,
                    port_mac,
                    interface,
                },
            )
    }

    fn node() -> impl Strategy<Value = K8sNode> {
        (
            text(),
            text(),
            proptest::option::of(addr()),
            proptest::option::of(addr()),
            few(net()),
        )
            .prop_map(
                |(uid, host_name, internal_ip, external_ip, pod_cidrs)| K8sNode {
                    uid,
                    host_name,
                    internal_ip,
                    external_ip,
                    pod_cidrs,
                },
            )
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Service),
            Just(Kind::Endpoints),
            Just(Kind::Pod),
            Just(Kind::Node)
        ]
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            service().prop_map(|s| Item::Service(Arc::new(s))),
            endpoints().prop_map(|e| Item::Endpoints(Arc::new(e))),
            pod().prop_map(Item::Pod),
            node().prop_map(Item::Node),
        ]
    }

    fn effect() -> impl Strategy<Value = Effect> {
        prop_oneof![
            1 => kind().prop_map(Effect::Clear),
            3 => item().prop_map(Effect::Upsert),
            1 => (kind(), text()).prop_map(|(k, uid)| Effect::Remove(k, uid)),
        ]
    }

    /// A change's record in the JSON form that logs written before 2026-12-07 hold.
    fn effects_json(seq: u64, effects: &[Effect]) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "effects": { "seq": seq, "effects": effects } }))
            .unwrap()
    }

    /// A snapshot's record in that JSON form.
    fn snapshot_json(seq: u64, store: &Store) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "snapshot": { "seq": seq, "store": store } }))
            .unwrap()
    }

    fn binary_effects(seq: u64, effects: &[Effect]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_effects(&mut out, seq, effects);
        out
    }

    fn binary_snapshot(seq: u64, store: &Store) -> Vec<u8> {
        let mut out = Vec::new();
        encode_snapshot(&mut out, seq, store);
        out
    }

    /// A store holding `effects`' items, with ELAN ids for their namespaces.
    fn store_of(effects: &[Effect]) -> Store {
        let mut store = Store::default();
        store.apply_effects(effects);
        store
    }

    /// Every field of every kind of item, set.
    fn sample() -> Vec<Effect> {
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        vec![
            Effect::Clear(Kind::Endpoints),
            Effect::Upsert(Item::Service(Arc::new(Service {
                uid: "s1".into(),
                name: "web".into(),
                network_ns: "ns".into(),
                cluster_ip: Some(v4("10.96.0.1")),
                cluster_ips: vec![v4("10.96.0.1"), v4("fd00::1")],
                external_ips: vec![v4("192.0.2.1")],
                load_balancer_ip: Some(v4("192.0.2.2")),
                ingress_ips: vec![v4("192.0.2.3")],
                service_ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Protocol::Udp,
                    port: 80,
                    target_port: "8080".into(),
                    node_port: Some(30080),
                }],
                endpoints: Some(vec!["p1".into()]),
                external_traffic_policy: Some("Local".into()),
                load_balancer_source_ranges: vec!["198.51.100.0/24".parse().unwrap()],
                health_check_node_port: Some(30999),
            }))),
            Effect::Upsert(Item::Endpoints(Arc::new(Endpoints {
                uid: "e1".into(),
                name: "web".into(),
                network_ns: "ns".into(),
                endpoint_addresses: vec![EndpointAddress {
                    ip_address: v4("10.244.1.5"),
                    host_name: "h".into(),
                    node_name: "n1".into(),
                    weight: Some(300),
                }],
                endpoint_ports: vec![EndpointPort {
                    name: "http".into(),
                    port: 8080,
                    protocol: Some(Protocol::Sctp),
                }],
            }))),
            Effect::Upsert(Item::Pod(Pod {
                uid: "p1".into(),
                name: "p".into(),
                host_ip: Some(v4("172.18.0.2")),
                network_ns: "ns".into(),
                port_mac: Some("02:00:00:00:00:01".into()),
                interface: vec![Interface {
                    uid: "i1".into(),
                    ip_address: Some(v4("10.244.1.5")),
                    network_id: "net".into(),
                    network_type: Some(NetworkType::Vxlan),
                    segmentation_id: Some(5001),
                }],
            })),
            Effect::Upsert(Item::Node(K8sNode {
                uid: "n1".into(),
                host_name: "h".into(),
                internal_ip: Some(v4("172.18.0.2")),
                external_ip: None,
                pod_cidrs: vec!["10.244.1.0/24".parse().unwrap()],
            })),
            Effect::Remove(Kind::Service, "s0".into()),
        ]
    }

    /// The binary form is what old logs will hold: a change to it must be a new form, not an
    /// edit of this one. These bytes were written out by hand from the module's description
    /// and checked against the encoder once.
    #[test]
    fn the_binary_form_is_stable() {
        let effects = vec![
            Effect::Clear(Kind::Pod),
            Effect::Upsert(Item::Endpoints(Arc::new(Endpoints {
                uid: "e".into(),
                name: "w".into(),
                network_ns: String::new(),
                endpoint_addresses: vec![EndpointAddress {
                    ip_address: "10.0.0.1".parse().unwrap(),
                    host_name: String::new(),
                    node_name: "n".into(),
                    weight: Some(300),
                }],
                endpoint_ports: vec![EndpointPort {
                    name: String::new(),
                    port: 8080,
                    protocol: None,
                }],
            }))),
            Effect::Remove(Kind::Node, "x".into()),
        ];
        #[rustfmt::skip]
        let expected: &[u8] = &[
            1, 0xac, 0x02, // effects, sequence 300
            3, // three effects
            0, 2, // clear pods
            1, 1, // upsert an endpoints object
            1, b'e', 1, b'w', 0, // uid, name, no namespace
            1, 4, 10, 0, 0, 1, 0, 1, b'n', 1, 0xac, 0x02, // one address: 10.0.0.1, node n, weight 300
            1, 0, 0x90, 0x3f, 0, // one port: no name, 8080, no protocol
            2, 3, 1, b'x', // remove node x
        ];
        assert_eq!(binary_effects(300, &effects), expected);
        assert_eq!(
            decode(expected).unwrap(),
            Record::Effects { seq: 300, effects }
        );
    }

    #[test]
    fn every_field_reads_back_in_both_forms() {
        let effects = sample();
        let expected = Record::Effects {
            seq: 7,
            effects: effects.clone(),
        };
        assert_eq!(decode(&binary_effects(7, &effects)).unwrap(), expected);
        assert_eq!(decode(&effects_json(7, &effects)).unwrap(), expected);
        let store = store_of(&effects);
        assert!(!store.elans.is_empty());
        for payload in [binary_snapshot(9, &store), snapshot_json(9, &store)] {
            let Record::Snapshot { seq, store: back } = decode(&payload).unwrap() else {
                panic!("not a snapshot");
            };
            assert_eq!(seq, 9);
            assert_eq!(
                serde_json::to_value(&*back).unwrap(),
                serde_json::to_value(&store).unwrap()
            );
        }
    }

    /// The binary form is much smaller than the JSON it replaces (the point of it).
    #[test]
    fn the_binary_form_is_a_fraction_of_the_json() {
        let effects = sample();
        let (binary, json) = (binary_effects(1, &effects), effects_json(1, &effects));
        assert!(
            binary.len() * 3 < json.len(),
            "{} bytes against {}",
            binary.len(),
            json.len()
        );
    }

    #[test]
    fn malformed_records_are_typed_errors_at_their_byte() {
        let good = binary_effects(5, &sample());
        let cases: Vec<(Vec<u8>, usize, &str)> = vec![
            (vec![], 0, "an empty record"),
            (vec![3, 0, 0], 0, "an unknown record form"),
            (
                good[..good.len() - 1].to_vec(),
                good.len() - 3,
                "a length larger",
            ),
            (vec![1, 0, 1, 1, 3, 0, 0, 1, 4, 10, 0], 9, "ends early"),
            (vec![1, 0, 1, 1, 3, 0, 0, 1], 8, "ends early"),
            ([good.as_slice(), &[0]].concat(), good.len(), "bytes after"),
            (vec![1, 0, 1, 0, 9], 4, "an unknown kind"),
            (vec![1, 0, 1, 7], 3, "an unknown effect"),
            (vec![1, 0, 0x80, 0x80, 0x01], 2, "a length larger"),
            (
                vec![
                    1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
                ],
                1,
                "larger than 64 bits",
            ),
            (vec![1, 0, 1, 2, 2, 2, 0xc3, 0x28], 6, "not UTF-8"),
            (vec![1, 0, 1, 1, 1, 0, 0, 0, 1, 5], 9, "neither 4 nor 6"),
            (
                vec![1, 0, 1, 1, 3, 0, 0, 0, 0, 1, 4, 10, 0, 0, 0, 33, 0],
                15,
                "a prefix longer",
            ),
            (vec![2, 0, 2, 0, 1, 0, 1, 0], 5, "came before"),
            (
                [&[2u8, 0, 0, 2][..], &item_bytes("n"), &item_bytes("n")].concat(),
                4 + item_bytes("n").len(),
                "came before",
            ),
        ];
        for (bytes, offset, reason) in cases {
            match decode(&bytes) {
                Err(DecodeError::Binary {
                    offset: at,
                    reason: why,
                }) => {
                    assert!(why.contains(reason), "{bytes:?}: {why}");
                    assert_eq!(at, offset, "{bytes:?}: {why}");
                }
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
        assert!(matches!(
            decode(b"{\"bogus\":1}"),
            Err(DecodeError::Json(_))
        ));
    }

    /// A node item with uid `uid` and nothing else.
    fn item_bytes(uid: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode_item(
            &mut out,
            &Item::Node(K8sNode {
                uid: uid.into(),
                host_name: String::new(),
                internal_ip: None,
                external_ip: None,
                pod_cidrs: Vec::new(),
            }),
        );
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whatever a change holds reads back the same from the binary form and from the JSON
        /// form older logs hold, and a snapshot of the store it builds reads back as that store.
        #[test]
        fn records_read_back_as_written(
            seq in any::<u64>(),
            effects in proptest::collection::vec(effect(), 0..8),
        ) {
            let expected = Record::Effects { seq, effects: effects.clone() };
            prop_assert_eq!(&decode(&binary_effects(seq, &effects)).unwrap(), &expected);
            prop_assert_eq!(&decode(&effects_json(seq, &effects)).unwrap(), &expected);
            let store = store_of(&effects);
            for payload in [binary_snapshot(seq, &store), snapshot_json(seq, &store)] {
                let Record::Snapshot { seq: s, store: back } = decode(&payload).unwrap() else {
                    panic!("not a snapshot");
                };
                prop_assert_eq!(s, seq);
                prop_assert_eq!(
                    serde_json::to_value(&*back).unwrap(),
                    serde_json::to_value(&store).unwrap()
                );
            }
        }

        /// Damaged bytes (whose checksum happened to match) give a record or an error, never
        /// a panic, and never more than the record describes.
        #[test]
        fn damaged_records_never_panic(
            effects in proptest::collection::vec(effect(), 1..6),
            snapshot in any::<bool>(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0..3u8), 1..4),
        ) {
            let mut bytes = if snapshot {
                binary_snapshot(3, &store_of(&effects))
            } else {
                binary_effects(3, &effects)
            };
            for (at, byte, how) in edits {
                let at = at % (bytes.len() + 1);
                match how {
                    0 => bytes.truncate(at),
                    1 => bytes.insert(at, byte),
                    _ => {
                        if let Some(b) = bytes.get_mut(at) {
                            *b = byte;
                        }
                    }
                }
            }
            let _ = decode(&bytes);
        }
    }
}

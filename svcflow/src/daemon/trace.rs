//! The live packet trace (`svcflow trace`, `POST /restconf/operations/svcflow:trace`), driven
//! from the central controller on the real switches: each node's task chooses the twins of its
//! flows ([`prepare`], from its engine's desired state), then [`run`] installs them on every
//! switch this daemon serves, injects the probe with a packet-out into the source port,
//! gathers the packet-ins, removes the twins and explains the path (`netvirt::trace`).
//!
//! I/O: OpenFlow through the nodes' switch handles, and the clock for the trace's deadline.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use coe::rest::Published;
use coe::rest::operational::TraceFailure;
use netvirt::config::Config;
use netvirt::desired::NodeBindings;
use netvirt::engine::Engine;
use netvirt::trace::{
    Family, Names, NodeTwins, Onward, Probe, Scope, TAGS, Trace, TraceReport, TraceRequest, plan,
    remove,
};
use openflow::Action;
use openflow::driver::{SwitchEvent, SwitchHandle};
use openflow::msg::{Body, PacketIn, PacketOut};
use tokio::sync::{broadcast, oneshot};

use super::agent::Query;
use super::operational::NodeView;

/// `OFPP_TABLE`: a packet-out through the flow tables.
const OFPP_TABLE: u32 = 0xffff_fff9;
/// How long a trace waits for its exit after the probe is sent.
const DEADLINE: Duration = Duration::from_secs(3);
/// How long a trace still listens after its exit, for reports of other switches.
const GRACE: Duration = Duration::from_millis(500);
/// How long the installation of the twins, or a node's answer, may take.
const STEP: Duration = Duration::from_secs(5);
/// How long the probe waits after the twins are installed. A switch applies a flow table
/// change to the flows its datapath has cached (megaflows) asynchronously, in its
/// revalidator threads, after it answered the barrier: a probe sent at once could take a
/// cached megaflow of earlier real traffic that ignores the DSCP field and meet no twin
/// (measured on the dual-stack lab: after real traffic, the far node's or the service's
/// report went missing).
const SETTLE: Duration = Duration::from_millis(300);

/// What a node's task is asked for a trace.
pub(crate) struct Ask {
    pub request: TraceRequest,
    pub id: u16,
    pub tag: u8,
    /// Whether the probe enters this node.
    pub source: bool,
}

/// A node's part of a trace.
pub(crate) struct Prepared {
    pub twins: NodeTwins,
    pub probe: Option<Probe>,
    pub unwatched: Vec<String>,
}

/// The trace tags in use; one per running trace.
#[derive(Default)]
pub(crate) struct Tags {
    used: Mutex<[bool; TAGS.len()]>,
    next_id: std::sync::atomic::AtomicU16,
}

/// A tag and an id held for one trace; freed when dropped.
struct Held<'a> {
    tags: &'a Tags,
    slot: usize,
    id: u16,
}

impl Tags {
    fn take(&self) -> Option<Held<'_>> {
        let mut used = self.used.lock().ok()?;
        let slot = used.iter().position(|u| !u)?;
        used[slot] = true;
        // 1 to 65535: trace 0's cookie would be every trace's.
        let n = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = n % u16::MAX + 1;
        Some(Held {
            tags: self,
            slot,
            id,
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Ok(mut used) = self.tags.used.lock() {
            used[self.slot] = false;
        }
    }
}

/// A node's part of a trace, from its task's state: pure but for reading it.
pub(crate) fn prepare(
    node: &str,
    model: &Published,
    bindings: Option<&NodeBindings>,
    engine: &Engine,
    config: &Config,
    ask: &Ask,
) -> Result<Prepared, TraceFailure> {
    let bindings = bindings
        .ok_or_else(|| TraceFailure::Unavailable(format!("node {node}: no OVSDB bindings yet")))?;
    let m = &model.model;
    let mut names = Names::default();
    for pod in m.pods.values().filter(|p| p.node == node) {
        if let Some(port) = bindings.ofports.get(&pod.iface_id) {
            names
                .ports
                .insert(*port, format!("pod {}/{}", pod.namespace, pod.name));
        }
    }
    if let Some(g) = &bindings.gateway {
        names.ports.insert(g.ofport, "service gateway".into());
    }
    if let Some(u) = &bindings.uplink {
        names.ports.insert(u.ofport, "uplink".into());
    }
    if let Some(t) = bindings.tunnel {
        names.ports.insert(t, "tunnel".into());
    }
    for (name, state) in engine.services() {
        names.services.insert(state.cookie, name);
    }
    for n in m.nodes.values() {
        for ip in &n.ips {
            names.nodes.insert(*ip, n.name.clone());
        }
        if let Some(cidr) = n.pod_cidr4() {
            names
                .pod_cidrs
                .push((cidr.network().into(), cidr.prefix_len(), n.name.clone()));
        }
        if let Some(cidr) = n.pod_cidr6() {
            names
                .pod_cidrs
                .push((cidr.network().into(), cidr.prefix_len(), n.name.clone()));
        }
    }
    // Ways on to other nodes: the tunnel (with an overlay), else the uplink towards each
    // other node's pod CIDRs (of the probe's family: `plan` skips the others); and the ports
    // their packets come in by.
    let mut onward = Vec::new();
    let mut arrivals = Vec::new();
    if let Some(t) = bindings.tunnel {
        onward.push(Onward { port: t, dst: None });
        arrivals.push(t);
    }
    if let Some(u) = &bindings.uplink {
        arrivals.push(u.ofport);
        if bindings.tunnel.is_none() {
            onward.extend(names.pod_cidrs.iter().filter(|(_, _, n)| n != node).map(
                |(net, len, _)| Onward {
                    port: u.ofport,
                    dst: Some((*net, *len)),
                },
            ));
        }
    }
    let probe = if ask.source {
        Some(probe(node, model, bindings, config, ask)?)
    } else {
        None
    };
    let family = ask.request.family().map_err(TraceFailure::Invalid)?;
    let scope = Scope {
        id: ask.id,
        tag: ask.tag,
        proto: ask.request.protocol,
        family,
        probe: probe.clone(),
        onward,
        arrivals,
    };
    let (twins, unwatched) = plan(engine.shards().flows(), &scope)
        .map_err(|e| TraceFailure::Unavailable(format!("node {node}: {e}")))?;
    Ok(Prepared {
        twins: NodeTwins {
            node: node.to_string(),
            twins,
            names,
        },
        probe,
        unwatched,
    })
}

/// The probe, from the request's source: a pod of the node (by name or address), else an
/// address beyond the node's uplink; of the destination's family (a dual-stack pod sends from
/// its address of that family).
fn probe(
    node: &str,
    model: &Published,
    bindings: &NodeBindings,
    config: &Config,
    ask: &Ask,
) -> Result<Probe, TraceFailure> {
    let r = &ask.request;
    let (dst, dport) = r.destination().map_err(TraceFailure::Invalid)?;
    let family = Family::of(dst);
    let from = r.from.trim();
    let by_ip: Option<IpAddr> = from.parse().ok();
    let excerpt = coe::rest::error::excerpt(from);
    if let Some(ip) = by_ip
        && Family::of(ip) != family
    {
        return Err(TraceFailure::Invalid(format!(
            "from: {ip} is an {} address and the destination {dst} an {family} one: give a \
             source of the destination's family (or the pod by name)",
            Family::of(ip)
        )));
    }
    let pod = model.model.pods.values().find(|p| match by_ip {
        Some(ip) => p.node == node && p.ips.contains(&ip),
        None => format!("{}/{}", p.namespace, p.name) == from,
    });
    let sport = 40000 + ask.id % 20000;
    // Where it enters, from whom, to whom it is sent, and from which address.
    let (in_port, eth_src, eth_dst, src) = match (pod, by_ip) {
        (Some(pod), _) => {
            if pod.node != node {
                return Err(TraceFailure::Invalid(format!(
                    "pod {excerpt} is on node {}, not {node}: trace it with --node {}",
                    pod.node, pod.node
                )));
            }
            let src = pod
                .ips
                .iter()
                .copied()
                .find(|ip| Family::of(*ip) == family)
                .ok_or_else(|| {
                    TraceFailure::Invalid(format!(
                        "pod {excerpt} has no {family} address, and the destination {dst} is \
                         {family}"
                    ))
                })?;
            let in_port = *bindings.ofports.get(&pod.iface_id).ok_or_else(|| {
                TraceFailure::Unavailable(format!(
                    "pod {excerpt} has no port on node {node}'s switch yet (iface-id {})",
                    pod.iface_id
                ))
            })?;
            let mac = pod
                .mac
                .or_else(|| bindings.macs.get(&pod.iface_id).copied())
                .map_or_else(|| local_mac(src), |m| m.0);
            (in_port, mac, config.gateway_mac.0, src)
        }
        (None, Some(src)) => {
            let uplink = bindings.uplink.ok_or_else(|| {
                TraceFailure::Invalid(format!(
                    "{src} is no pod of node {node}, and the node has no uplink to inject \
                     it from"
                ))
            })?;
            (uplink.ofport, uplink.next_hop_mac.0, uplink.mac.0, src)
        }
        (None, None) => {
            return Err(TraceFailure::Invalid(format!(
                "from: {excerpt:?} is neither a pod (namespace/name) nor an IP address"
            )));
        }
    };
    Ok(Probe {
        in_port,
        eth_src,
        eth_dst,
        src,
        dst,
        proto: r.protocol,
        sport,
        dport,
        tag: ask.tag,
    })
}

/// A locally administered MAC for a pod whose MAC no input gives: `0a:58` and the address's
/// last four bytes.
fn local_mac(ip: IpAddr) -> [u8; 6] {
    let [a, b, c, d] = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x0a, 0x58, a, b, c, d]
}

/// Runs one trace over the nodes this daemon serves (`views`).
pub(crate) async fn run(
    views: Vec<(String, NodeView)>,
    tags: &Tags,
    request: TraceRequest,
) -> Result<TraceReport, TraceFailure> {
    let held = tags.take().ok_or_else(|| {
        TraceFailure::Unavailable(format!(
            "{} traces are running already; try again in a few seconds",
            TAGS.len()
        ))
    })?;
    let (id, tag) = (held.id, TAGS[held.slot]);
    let mut parts = Vec::new();
    for (node, view) in &views {
        let (tx, rx) = oneshot::channel();
        let ask = Ask {
            request: request.clone(),
            id,
            tag,
            source: *node == request.node,
        };
        let asked = view.query.send(Query::Trace(Box::new(ask), tx)).await;
        let answer = match asked {
            Ok(()) => tokio::time::timeout(STEP, rx)
                .await
                .ok()
                .and_then(|r| r.ok()),
            Err(_) => None,
        };
        match answer {
            Some(Ok(p)) => parts.push((view.switch.clone(), p)),
            Some(Err(e)) if *node == request.node => return Err(e),
            // Another node that cannot take part: the trace ends at its tunnel, if it goes
            // there, and says so.
            Some(Err(e)) => tracing::info!("trace {id}: node {node} does not take part: {e}"),
            None if *node == request.node => {
                return Err(TraceFailure::Unavailable(format!(
                    "node {node}: its switch left"
                )));
            }
            None => {}
        }
    }
    let Some(probe) = parts.iter().find_map(|(_, p)| p.probe.clone()) else {
        return Err(TraceFailure::Unavailable(format!(
            "node {} is not served by this controller now",
            request.node
        )));
    };
    // Installed, run and removed in a task of its own, so that a client that goes away
    // mid-trace leaves no twin behind (their hard timeout is the last resort).
    let task = tokio::spawn(trace(parts, probe, request, id));
    let report = task
        .await
        .map_err(|e| TraceFailure::Unavailable(format!("the trace stopped: {e}")));
    drop(held);
    report?
}

async fn trace(
    parts: Vec<(SwitchHandle, Prepared)>,
    probe: Probe,
    request: TraceRequest,
    id: u16,
) -> Result<TraceReport, TraceFailure> {
    let mut events: Vec<(String, broadcast::Receiver<SwitchEvent>)> = Vec::new();
    let mut installed = Vec::new();
    let mut failure = None;
    for (switch, part) in &parts {
        let node = part.twins.node.clone();
        // Followed before anything is installed, so no report is missed.
        events.push((node.clone(), switch.events()));
        let mods: Vec<Body> = part.twins.twins.iter().map(|t| t.flow_mod()).collect();
        match tokio::time::timeout(STEP, switch.bundle(mods)).await {
            Ok(Ok(())) => installed.push(switch.clone()),
            Ok(Err(e)) => {
                failure = Some(format!(
                    "node {node}: the switch refused the trace's flows: {e}"
                ));
                break;
            }
            Err(_) => {
                failure = Some(format!(
                    "node {node}: the switch did not take the trace's flows in time"
                ));
                break;
            }
        }
    }
    let source = parts
        .iter()
        .find(|(_, p)| p.probe.is_some())
        .map(|(s, _)| s.clone());
    let mut reports: Vec<(String, PacketIn)> = Vec::new();
    let model = Trace {
        request,
        probe: probe.clone(),
        nodes: parts.iter().map(|(_, p)| p.twins.clone()).collect(),
        unwatched: parts
            .iter()
            .flat_map(|(_, p)| p.unwatched.clone())
            .collect(),
    };
    if failure.is_none()
        && let Some(source) = source
    {
        tokio::time::sleep(SETTLE).await;
        let out = PacketOut {
            buffer_id: u32::MAX,
            in_port: probe.in_port,
            actions: vec![Action::Output {
                port: OFPP_TABLE,
                max_len: 0,
            }],
            data: probe.frame(),
        };
        match source.send(Body::PacketOut(out)).await {
            Ok(_) => gather(&model, std::mem::take(&mut events), &mut reports).await,
            Err(e) => failure = Some(format!("sending the probe: {e}")),
        }
    }
    for switch in installed {
        let removed = async {
            switch.send(remove(id)).await?;
            switch.barrier().await
        };
        let why = match tokio::time::timeout(STEP, removed).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "the switch did not answer".to_string(),
        };
        tracing::warn!(
            "trace {id}: removing its flows: {why}; they expire {} s after they were added",
            netvirt::trace::HARD_TIMEOUT
        );
    }
    if let Some(f) = failure {
        return Err(TraceFailure::Unavailable(f));
    }
    Ok(model.report(&reports))
}

/// Gathers the trace's packet-ins until one reports an exit, or the deadline.
async fn gather(
    model: &Trace,
    events: Vec<(String, broadcast::Receiver<SwitchEvent>)>,
    reports: &mut Vec<(String, PacketIn)>,
) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, PacketIn)>();
    let mut forwarders = Vec::new();
    let mask = netvirt::trace::TRACE_MASK;
    let ours = model
        .nodes
        .iter()
        .flat_map(|n| n.twins.first())
        .map(|t| t.entry.cookie & mask)
        .next();
    for (node, mut receiver) in events {
        let tx = tx.clone();
        forwarders.push(tokio::spawn(async move {
            loop {
                match receiver.recv().await {
                    Ok(SwitchEvent::PacketIn(pi)) => {
                        if Some(pi.cookie & mask) == ours && tx.send((node.clone(), pi)).is_err() {
                            return;
                        }
                    }
                    Ok(SwitchEvent::Disconnected(_)) | Err(broadcast::error::RecvError::Closed) => {
                        return;
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                }
            }
        }));
    }
    drop(tx);
    // Each switch reports on its own connection, and a loaded one late: once the path is
    // whole (an exit, and the probe's node sending it on if another node took it in), a
    // short grace follows for what is still on its way.
    let mut until = deadline;
    while let Ok(Some((node, pi))) = tokio::time::timeout_at(until, rx.recv()).await {
        reports.push((node, pi));
        if model.complete(reports) {
            until = until.min(tokio::time::Instant::now() + GRACE);
        }
    }
    for f in forwarders {
        f.abort();
    }
}

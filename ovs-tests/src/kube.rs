//! Kubernetes end to end: a sandbox node driven by `svcflow run --kubeconfig`, watching the
//! in-process fake API server (`coe::k8s::fake`) bound inside the node's network namespace,
//! so that the daemon, running there beside `ovs-vswitchd`, reaches it on loopback.
//!
//! [`KubeNode::start`] gives node `n1` (InternalIP [`NODE_IP`], pod CIDR `10.244.0.0/24`)
//! with `br-int` made by the daemon, and an "external" host `ext` ([`EXT_IP`]) on the uplink
//! (ofport 5), which is also the uplink's next hop. The cluster has a second Node, `n2`
//! ([`REMOTE_NODE_IP`], pod CIDR `10.244.1.0/24`), with no switch of its own: its pods are
//! addresses on `ext`'s loopback ([`KubeNode::add_remote_pod_ip`]), so traffic that svcflow
//! sends to a remote endpoint leaves through the uplink and is answered by whatever `ext`
//! serves. Everything reaches the daemon as Kubernetes JSON through the fake API server.
//!
//! [`KubeNode::start_dual_stack`] makes the same cluster dual-stack: both Nodes also have an
//! IPv6 InternalIP ([`NODE_IP6`], [`REMOTE_NODE_IP6`]) and an IPv6 pod CIDR, `ext` also has
//! [`EXT_IP6`], and the daemon runs with `--service-cidr6` [`SERVICE_CIDR6`]; pods added with
//! [`KubeNode::add_dual_stack_pod`] have an address of each family.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

use std::os::fd::AsFd;
use std::time::Duration;

use coe::k8s::fake::FakeApiServer;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use crate::svcflow::Daemon;
use crate::{Attempt, Host, HostSpec, Sandbox, wait_for};

/// The bridge the daemon creates.
pub const BR: &str = "br-int";
/// This node's name.
pub const NODE: &str = "n1";
/// This node's InternalIP, on the uplink's subnet.
pub const NODE_IP: &str = "192.168.50.10";
/// The other node of the cluster, which has no switch in the sandbox.
pub const REMOTE_NODE: &str = "n2";
/// The other node's InternalIP.
pub const REMOTE_NODE_IP: &str = "192.168.50.11";
/// The external host on the uplink.
pub const EXT_IP: &str = "192.168.50.1";
/// The external host's MAC: the uplink's next hop.
pub const EXT_MAC: &str = "02:00:00:00:00:e1";
/// The uplink's OpenFlow port (the daemon's `svc-gw` takes the first free one, 1).
pub const UPLINK_OFPORT: u16 = 5;
/// The virtual gateway of this node's pods (the first address of its pod CIDR).
pub const POD_GATEWAY: &str = "10.244.0.1";
/// Dual-stack clusters: this node's IPv6 InternalIP, on the uplink's IPv6 subnet.
pub const NODE_IP6: &str = "fd00:50::10";
/// Dual-stack clusters: the other node's IPv6 InternalIP.
pub const REMOTE_NODE_IP6: &str = "fd00:50::11";
/// Dual-stack clusters: the external host's IPv6 address.
pub const EXT_IP6: &str = "fd00:50::1";
/// Dual-stack clusters: this node's IPv6 pod CIDR.
pub const POD_CIDR6: &str = "fd00:10:244::/64";
/// Dual-stack clusters: the other node's IPv6 pod CIDR.
pub const REMOTE_POD_CIDR6: &str = "fd00:10:244:1::/64";
/// Dual-stack clusters: the IPv6 virtual gateway of this node's pods.
pub const POD_GATEWAY6: &str = "fd00:10:244::1";
/// Dual-stack clusters: the daemon's `--service-cidr6`.
pub const SERVICE_CIDR6: &str = "fd00:10:96::/112";

/// One node driven by `svcflow run --kubeconfig` against a fake API server; see the module
/// docs. Fields drop in order: the daemon, the API server, its runtime, then the sandbox.
pub struct KubeNode {
    /// More `svcflow` replicas, if [`KubeNode::start_daemons`] started several.
    pub others: Vec<Daemon>,
    /// The `svcflow` daemon (the first replica).
    pub daemon: Daemon,
    /// The fake API server: change the cluster with `apply` and `delete`.
    pub api: FakeApiServer,
    /// The host on the uplink: an external client, and the other node's pods.
    pub ext: Host,
    rt: tokio::runtime::Runtime,
    /// The node.
    pub sb: Sandbox,
}

impl std::fmt::Debug for KubeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeNode")
            .field("sandbox", &self.sb.id())
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

/// Runs `f` on a thread that has entered network namespace `netns`, so that the sockets it
/// makes live there (they keep that namespace whichever thread uses them later).
pub fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{netns}");
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("enter {path}: {e}"));
        f()
    })
    .join()
    .unwrap_or_else(|_| panic!("the thread in network namespace {netns} panicked"))
}

/// A Kubernetes object from its JSON.
pub fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("not a valid object: {e}"))
}

/// An endpoint's `conditions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conditions {
    /// `ready`
    pub ready: bool,
    /// `serving`
    pub serving: bool,
    /// `terminating`
    pub terminating: bool,
}

impl Conditions {
    /// Ready and serving.
    pub const READY: Conditions = Conditions {
        ready: true,
        serving: true,
        terminating: false,
    };
    /// Neither ready nor serving (e.g. failing its readiness probe).
    pub const NOT_READY: Conditions = Conditions {
        ready: false,
        serving: false,
        terminating: false,
    };
    /// Terminating, but still serving: kube-proxy's fallback when nothing is ready.
    pub const SERVING_TERMINATING: Conditions = Conditions {
        ready: false,
        serving: true,
        terminating: true,
    };
    /// Terminating and no longer serving.
    pub const TERMINATING: Conditions = Conditions {
        ready: false,
        serving: false,
        terminating: true,
    };
}

/// One EndpointSlice endpoint: its address, node and conditions.
pub fn endpoint(ip: &str, node: &str, conditions: Conditions) -> Value {
    json!({"addresses": [ip], "nodeName": node,
           "conditions": {"ready": conditions.ready, "serving": conditions.serving,
                          "terminating": conditions.terminating}})
}

/// EndpointSlice `name` of `service` in `default`, with `ports` (a JSON array of
/// `{name, protocol, port}`) and `endpoints` (see [`endpoint`]), of address type IPv4.
pub fn slice(service: &str, name: &str, ports: Value, endpoints: Vec<Value>) -> EndpointSlice {
    slice_of("IPv4", service, name, ports, endpoints)
}

/// [`slice`] of address type `IPv6`.
pub fn slice6(service: &str, name: &str, ports: Value, endpoints: Vec<Value>) -> EndpointSlice {
    slice_of("IPv6", service, name, ports, endpoints)
}

fn slice_of(
    address_type: &str,
    service: &str,
    name: &str,
    ports: Value,
    endpoints: Vec<Value>,
) -> EndpointSlice {
    from(json!({
        "metadata": {"namespace": "default", "name": name,
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by":
                                    "endpointslice-controller.k8s.io"}},
        "addressType": address_type,
        "ports": ports,
        "endpoints": endpoints,
    }))
}

/// A Service in `default` from its `spec` (and optional `status`).
pub fn service(name: &str, spec: Value, status: Option<Value>) -> Service {
    let mut object = json!({"metadata": {"namespace": "default", "name": name}, "spec": spec});
    if let Some(status) = status {
        object["status"] = status;
    }
    from(object)
}

/// Starts replica `i` of several electing over Leases (`--election lease`, namespace
/// `svcflow`, `lease_seconds` long, hold-down 2 s), in the node's namespace with its own
/// state directory, watching the cluster through the kubeconfig file `kubeconfig`. Its
/// OpenFlow port is 6653 + i, REST 8181 + i, metrics 10249 + 10 i, health 10256 + 10 i; `run`
/// numbers its log.
pub fn lease_replica(
    sb: &Sandbox,
    i: usize,
    run: u32,
    kubeconfig: &str,
    lease_seconds: u64,
) -> Result<Daemon, crate::SandboxError> {
    let args = [
        format!("--openflow-listen=127.0.0.1:{}", 6653 + i),
        format!("--rest-listen=127.0.0.1:{}", 8181 + i),
        format!("--metrics-listen=127.0.0.1:{}", 10249 + 10 * i),
        format!("--healthz-listen=127.0.0.1:{}", 10256 + 10 * i),
        format!("--ovsdb-remote={NODE}={}", sb.db_remote()),
        format!("--kubeconfig={kubeconfig}"),
        "--election=lease".into(),
        "--lease-namespace=svcflow".into(),
        format!("--lease-duration={lease_seconds}"),
        "--hold-down=2".into(),
        "--encap=none".into(),
        "--log-level=info".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let state = sb.dir().join(format!("state-{i}"));
    Daemon::spawn_with_state(sb, run, Some(sb.node_netns()), &args, &state)
}

/// Writes the kubeconfig text into the sandbox's directory; returns the file's path.
pub fn write_kubeconfig(sb: &Sandbox, text: &str) -> String {
    let path = sb.dir().join("kubeconfig");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write the kubeconfig: {e}"));
    path.to_string_lossy().to_string()
}

/// Splits a `--peer` answer, `NAME@IP`, into the backend and the source address it saw.
pub fn peer(answer: &str) -> (&str, &str) {
    answer.split_once('@').unwrap_or((answer, ""))
}

impl KubeNode {
    /// Starts the sandbox, the fake API server in its node namespace and the daemon (with
    /// `--host-node n1`), waits for `br-int`, attaches `ext` as the uplink, and publishes
    /// namespace `default` and Nodes `n1` and `n2`.
    pub fn start() -> KubeNode {
        Self::start_daemons(|sb, kubeconfig| {
            let daemon = Daemon::start_kube(
                sb,
                1,
                kubeconfig,
                &["--host-node", NODE, "--log-level", "debug"],
            )
            .unwrap_or_else(|e| panic!("cannot start svcflow: {e}"));
            vec![daemon]
        })
    }

    /// [`KubeNode::start`] on a dual-stack cluster (see the module docs), the daemon with
    /// `--service-cidr6` [`SERVICE_CIDR6`].
    pub fn start_dual_stack() -> KubeNode {
        Self::start_with(true, |sb, kubeconfig| {
            let more = [
                "--host-node",
                NODE,
                "--log-level",
                "debug",
                "--service-cidr6",
                SERVICE_CIDR6,
            ];
            let daemon = Daemon::start_kube(sb, 1, kubeconfig, &more)
                .unwrap_or_else(|e| panic!("cannot start svcflow: {e}"));
            vec![daemon]
        })
    }

    /// [`KubeNode::start`] with the daemons `start` returns (given the sandbox and the
    /// kubeconfig's text): the first is [`KubeNode::daemon`], the others
    /// [`KubeNode::others`].
    pub fn start_daemons(start: impl FnOnce(&Sandbox, &str) -> Vec<Daemon>) -> KubeNode {
        Self::start_with(false, start)
    }

    fn start_with(dual_stack: bool, start: impl FnOnce(&Sandbox, &str) -> Vec<Daemon>) -> KubeNode {
        let rt = tokio::runtime::Runtime::new()
            .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"));
        let mut sb =
            Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
        let api = {
            let handle = rt.handle().clone();
            in_netns(sb.node_netns(), move || {
                handle
                    .block_on(FakeApiServer::start_new())
                    .unwrap_or_else(|e| panic!("cannot start the fake API server: {e}"))
            })
        };
        let mut daemons = start(&sb, &api.kubeconfig()).into_iter();
        let Some(daemon) = daemons.next() else {
            panic!("no daemon to start");
        };
        let others: Vec<Daemon> = daemons.collect();
        // The daemon creates br-int (with its gateway port) before hosts can be attached.
        let ready = wait_for("br-int and svc-gw", Duration::from_secs(30), || {
            sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
                .ok()
                .filter(|p| p.trim().parse::<i64>().is_ok_and(|p| p > 0))
        });
        if let Err(e) = ready {
            panic!("{e}\ndaemon log:\n{}", daemon.log());
        }
        let mut spec = HostSpec::new("ext", &format!("{EXT_IP}/24"), EXT_MAC, UPLINK_OFPORT)
            .with_gateway(NODE_IP);
        if dual_stack {
            spec = spec.with_ipv6(&format!("{EXT_IP6}/64"), Some(NODE_IP6));
        }
        let ext = sb
            .add_host(BR, spec)
            .unwrap_or_else(|e| panic!("cannot add the external host: {e}"));
        sb.vsctl(&[
            "set",
            "interface",
            "ext",
            "external_ids:svcflow-role=uplink",
            &format!("external_ids:svcflow-next-hop-mac=\"{EXT_MAC}\""),
        ])
        .unwrap_or_else(|e| panic!("cannot mark the uplink: {e}"));
        let node = KubeNode {
            others,
            daemon,
            api,
            ext,
            rt,
            sb,
        };
        node.apply::<Namespace>(json!({"metadata": {"name": "default"}}));
        for (name, ip, cidr, ip6, cidr6) in [
            (NODE, NODE_IP, "10.244.0.0/24", NODE_IP6, POD_CIDR6),
            (
                REMOTE_NODE,
                REMOTE_NODE_IP,
                "10.244.1.0/24",
                REMOTE_NODE_IP6,
                REMOTE_POD_CIDR6,
            ),
        ] {
            let (addresses, cidrs) = if dual_stack {
                (vec![ip, ip6], vec![cidr, cidr6])
            } else {
                (vec![ip], vec![cidr])
            };
            let addresses: Vec<Value> = addresses
                .into_iter()
                .map(|a| json!({"type": "InternalIP", "address": a}))
                .collect();
            node.apply::<Node>(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {"podCIDR": cidr, "podCIDRs": cidrs},
                "status": {"addresses": addresses},
            }));
        }
        node
    }

    /// Panics with `what` and the daemon's log.
    pub fn fail(&self, what: &dyn std::fmt::Display) -> ! {
        panic!("{what}\ndaemon log:\n{}", self.daemon.log());
    }

    /// Creates or replaces an object given as JSON.
    pub fn apply<K>(&self, object: Value)
    where
        K: k8s_openapi::Resource + serde::Serialize + serde::de::DeserializeOwned,
    {
        let object: K = from(object);
        self.put(&object);
    }

    /// Creates or replaces an object.
    pub fn put<K>(&self, object: &K)
    where
        K: k8s_openapi::Resource + serde::Serialize,
    {
        if let Err(e) = self.api.apply(object) {
            self.fail(&format!("the fake API server refused a {}: {e}", K::KIND));
        }
    }

    /// Deletes an object of kind `K` in `default`.
    pub fn delete<K: k8s_openapi::Resource>(&self, name: &str) {
        self.api.delete::<K>("default", name);
    }

    /// Replaces EndpointSlice `name` of `service`; see [`slice`].
    pub fn put_slice(&self, service: &str, name: &str, ports: Value, endpoints: Vec<Value>) {
        self.put(&slice(service, name, ports, endpoints));
    }

    /// A ClusterIP Service `name` on `ip`:80 (TCP `http`, target port 8080) and its
    /// EndpointSlice `<name>-1`: pods 10.244.0.11 and 10.244.0.12 on this node, ready (the
    /// pods the replica tests serve from).
    pub fn put_web(&self, name: &str, ip: &str) {
        self.put(&service(
            name,
            json!({"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}),
            None,
        ));
        self.put_slice(
            name,
            &format!("{name}-1"),
            json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
            vec![
                endpoint("10.244.0.11", NODE, Conditions::READY),
                endpoint("10.244.0.12", NODE, Conditions::READY),
            ],
        );
    }

    /// A pod of `default` on this node: a host on `ofport` with address `ip` in the pod CIDR,
    /// bound by the iface-id rule `<namespace>_<name>`, and its Pod object (with its MAC in
    /// the `svcflow.io/mac-address` annotation).
    pub fn add_pod(&mut self, name: &str, ip: &str, ofport: u16) -> Host {
        self.add_pod_with(name, ip, None, ofport)
    }

    /// [`KubeNode::add_pod`] with an IPv6 address `ip6` (in [`POD_CIDR6`]) too: its IPv6
    /// default route is via [`POD_GATEWAY6`], and its Pod's `status.podIPs` lists both.
    pub fn add_dual_stack_pod(&mut self, name: &str, ip: &str, ip6: &str, ofport: u16) -> Host {
        self.add_pod_with(name, ip, Some(ip6), ofport)
    }

    fn add_pod_with(&mut self, name: &str, ip: &str, ip6: Option<&str>, ofport: u16) -> Host {
        let last = ip
            .rsplit('.')
            .next()
            .and_then(|o| o.parse::<u8>().ok())
            .unwrap_or_else(|| panic!("bad pod address {ip}"));
        let mac = format!("0a:58:0a:f4:00:{last:02x}");
        let mut spec =
            HostSpec::new(name, &format!("{ip}/24"), &mac, ofport).with_gateway(POD_GATEWAY);
        let mut pod_ips = vec![json!({"ip": ip})];
        if let Some(ip6) = ip6 {
            spec = spec.with_ipv6(&format!("{ip6}/64"), Some(POD_GATEWAY6));
            pod_ips.push(json!({"ip": ip6}));
        }
        let host = self
            .sb
            .add_host(BR, spec)
            .unwrap_or_else(|e| panic!("cannot add pod {name}: {e}"));
        let iface_id = coe::k8s::iface_id("default", name);
        self.sb
            .vsctl(&[
                "set",
                "interface",
                name,
                &format!("external_ids:iface-id={iface_id}"),
            ])
            .unwrap_or_else(|e| panic!("cannot bind pod {name}: {e}"));
        self.apply::<Pod>(json!({
            "metadata": {"namespace": "default", "name": name,
                         "annotations": {"svcflow.io/mac-address": mac}},
            "spec": {"nodeName": NODE, "containers": []},
            "status": {"phase": "Running", "podIP": ip, "podIPs": pod_ips},
        }));
        host
    }

    /// Gives `ext` the address `ip` (IPv4, or IPv6 on a dual-stack cluster) of a pod on `n2`
    /// (on its loopback): what svcflow sends to that endpoint leaves through the uplink and
    /// is answered by `ext`'s servers.
    pub fn add_remote_pod_ip(&self, ip: &str) {
        let len = if ip.contains(':') { 128 } else { 32 };
        self.ext
            .run(&["ip", "addr", "add", &format!("{ip}/{len}"), "dev", "lo"])
            .unwrap_or_else(|e| panic!("cannot add {ip} to ext: {e}"));
    }

    /// Waits (up to 40 s, which covers the daemon's first sync) until `f` returns `Some`,
    /// and fails with the daemon's log if it never does.
    pub fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        wait_for(what, Duration::from_secs(40), &mut f).unwrap_or_else(|e| self.fail(&e))
    }

    /// `host` makes `count` attempts at `target` (`svcflow-probe connect`).
    pub fn connect(
        &self,
        host: &Host,
        proto: &str,
        target: &str,
        count: u32,
        extra: &[&str],
    ) -> Vec<Attempt> {
        host.connect(proto, target, count, extra)
            .unwrap_or_else(|e| self.fail(&format!("svcflow-probe connect {target}: {e}")))
    }

    /// The tokio runtime the fake API server runs on.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }
}

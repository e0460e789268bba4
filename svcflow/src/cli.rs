//! Command-line interface.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ipnet::{Ipv4Net, Ipv6Net};

use crate::config::{
    ConfigError, FileConfig, RunConfig, TlsFiles, parse_datapath_type, parse_election,
    parse_kubernetes, parse_log_level, parse_max_backoff, parse_ovsdb_remote, parse_port_range,
};

/// svcflow: an OpenFlow controller that replaces kube-proxy and iptables on Open vSwitch.
#[derive(Debug, Parser)]
#[command(name = "svcflow", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum Command {
    /// Run the controller daemon. Flags override the TOML file given with --config.
    Run(RunArgs),
    /// OpenFlow 1.3 tools.
    #[command(subcommand)]
    Ofp(OfpCommand),
    /// Print what a node runs itself that svcflow cannot do over OVSDB: the gateway port's
    /// host side, and for the overlay on the userspace datapath its tunnel endpoint.
    NodeSetup(NodeSetupArgs),
    /// The REST state's store: move it between a local log and an OVSDB cluster, or print
    /// the OVSDB schema.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Print what the daemon installed, from its REST operational view: `services [NAME]`.
    #[command(subcommand)]
    Get(GetCommand),
    /// Print the flows and groups svcflow would install for a model file (the golden
    /// scenarios' TOML format), offline, as `ovs-ofctl dump-flows --no-stats` and
    /// `dump-groups` print them.
    Render(RenderArgs),
    /// Dry run: print what the daemon would change on each node's live switch now, read
    /// from the switches and the current model, as an `ovs-ofctl bundle` file; nothing is
    /// changed.
    Plan(PlanArgs),
    /// Live packet trace: inject a tagged probe into a node's switch from a pod (or an
    /// address beyond the uplink) to IP:PORT, and print the path it took (classifier,
    /// service, bucket, NAT, output or drop) in `ovs-ofctl` terms.
    Trace(TraceArgs),
}

/// `svcflow trace` arguments.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The node whose switch the probe enters.
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The source: a pod (`NAMESPACE/NAME`; a dual-stack pod sends from its address of the
    /// destination's family) or an address of the destination's family (a pod's, else a host
    /// beyond the node's uplink).
    #[arg(long, value_name = "POD|IP")]
    pub from: String,
    /// The destination: `IPv4:PORT` or `[IPv6]:PORT`.
    #[arg(long, value_name = "IP:PORT")]
    pub to: String,
    /// `tcp` (a SYN) or `udp`.
    #[arg(long, value_name = "PROTO", default_value = "tcp")]
    pub proto: String,
    #[command(flatten)]
    pub daemon: DaemonRest,
    /// `text` (the default) or `json`.
    #[arg(short = 'o', long, value_name = "FORMAT", default_value = "text")]
    pub output: String,
}

/// Where the commands that ask the daemon reach its REST northbound.
#[derive(Debug, Args)]
pub struct DaemonRest {
    /// The daemon's REST northbound.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8181")]
    pub rest: String,
    /// An `Authorization` header value (`Basic …` or `Bearer …`), or `SVCFLOW_AUTH`.
    #[arg(long, env = "SVCFLOW_AUTH", value_name = "VALUE")]
    pub auth: Option<String>,
    /// For an `https://` URL: the PEM CA certificate that signed the daemon's certificate (its
    /// `--ssl-certificate`), or `SVCFLOW_CA_CERT`. Its host name is not checked, as OVS does.
    #[arg(long, env = "SVCFLOW_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

/// `svcflow plan` arguments.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// One node only.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    #[command(flatten)]
    pub daemon: DaemonRest,
    /// `text` (the default: a bundle file) or `json`.
    #[arg(short = 'o', long, value_name = "FORMAT", default_value = "text")]
    pub output: String,
}

/// `svcflow get` subcommands.
#[derive(Debug, Subcommand)]
pub enum GetCommand {
    /// Services as installed: per node, the group, its endpoints with their bucket's packet
    /// count, and the counters.
    Services(GetArgs),
    /// Nodes: the switch's connection, this daemon's OpenFlow role on it, flows and groups,
    /// and the last sync (`-o json`: with the last few syncs).
    Nodes(GetArgs),
}

/// `svcflow get` arguments.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// One service (`NAMESPACE/NAME` or its uid), or one node (its name).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub daemon: DaemonRest,
    /// `table` (the default) or `json`.
    #[arg(short = 'o', long, value_name = "FORMAT", default_value = "table")]
    pub output: String,
}

/// `svcflow render` arguments.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The model file (see netvirt/tests/scenarios/*/input.toml).
    #[arg(value_name = "MODEL.toml")]
    pub file: PathBuf,
    /// Print only the flows.
    #[arg(long, conflicts_with = "groups")]
    pub flows: bool,
    /// Print only the groups.
    #[arg(long)]
    pub groups: bool,
}

/// `svcflow store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Write the whole REST state to FILE (JSON: each container as GET returns it).
    Export(StoreArgs),
    /// Make the store hold exactly FILE's state (as `export` wrote it): every container is
    /// replaced at once, as one write validated as a PUT of the whole datastore; a refused
    /// import changes nothing. Stop the daemons that use a local store first.
    Import(StoreArgs),
    /// Print the `Svcflow` database schema (deploy/svcflow.ovsschema) for `ovsdb-tool
    /// create-cluster`.
    Schema,
}

/// A store and a file.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The export file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// `local` (the log in --state-dir) or `ovsdb:REMOTE[,REMOTE...]`, as `svcflow run` takes
    /// it [default: local].
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
    /// The local store's directory [default: /var/lib/svcflow].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Allowed NodePort range, LOW-HIGH, for validating an import [default: 30000-32767].
    #[arg(long, value_name = "LOW-HIGH")]
    pub node_port_range: Option<String>,
}

/// `svcflow node-setup` flags.
#[derive(Debug, Args)]
pub struct NodeSetupArgs {
    /// The node's name, as in the model.
    #[arg(value_name = "NODE")]
    pub node: String,
    /// The node's underlay address with the underlay's prefix, e.g. 192.168.50.11/24: with
    /// --encap, it goes onto br-int's own port (the userspace datapath's tunnel endpoint).
    /// Give it once per family the node has an address of (e.g. also fd00:50::11/64): the
    /// node's first address of each family is a tunnel endpoint, and each pair of nodes
    /// tunnels over a family both have.
    #[arg(long, value_name = "CIDR")]
    pub address: Vec<ipnet::IpNet>,
    /// The node's pod CIDR (the gateway port's host side routes it) [default: none].
    #[arg(long, value_name = "CIDR")]
    pub pod_cidr: Option<Ipv4Net>,
    /// The node's IPv6 pod CIDR, on a dual-stack or IPv6 node [default: none].
    #[arg(long, value_name = "CIDR")]
    pub pod_cidr6: Option<Ipv6Net>,
    /// `geneve`, `vxlan` or `none`, as given to `svcflow run` [default: geneve].
    #[arg(long, value_name = "ENCAP")]
    pub encap: Option<String>,
    /// The service CIDR, as given to `svcflow run` [default: 10.96.0.0/12].
    #[arg(long, value_name = "CIDR")]
    pub service_cidr: Option<Ipv4Net>,
    /// The IPv6 service CIDR, as given to `svcflow run` [default: none].
    #[arg(long, value_name = "CIDR")]
    pub service_cidr6: Option<Ipv6Net>,
    /// The datapath type, as given to `svcflow run`: `netdev` or `system` [default: netdev].
    #[arg(long, value_name = "TYPE")]
    pub datapath_type: Option<String>,
}

/// `svcflow ofp` subcommands.
#[derive(Debug, Subcommand)]
pub enum OfpCommand {
    /// Print OpenFlow messages given in hex as `ovs-ofctl ofp-print` does.
    ///
    /// The hex may contain spaces and newlines and may span several arguments; with no
    /// argument, or `-`, it is read from stdin. Concatenated messages are each printed.
    Print(PrintArgs),
    /// Print a switch's flows as `ovs-ofctl -O OpenFlow13 dump-flows --no-stats` does, read
    /// over svcflow's own session.
    DumpFlows(SwitchArgs),
    /// Print a switch's groups as `ovs-ofctl -O OpenFlow13 dump-groups` does.
    DumpGroups(SwitchArgs),
}

/// A switch to talk to.
#[derive(Debug, Args)]
pub struct SwitchArgs {
    /// `unix:PATH` (e.g. the bridge's `br-int.mgmt` socket), `tcp:IP:PORT`, or `ssl:IP:PORT`
    /// (a bridge's `pssl:` service listener) with the three TLS flags.
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// TLS for `ssl:`: the PEM private key presented to the switch (with --ssl-certificate and
    /// --ssl-ca-cert; all three or none), as `ovs-ofctl --private-key`.
    #[arg(long, value_name = "FILE")]
    pub ssl_private_key: Option<PathBuf>,
    /// TLS for `ssl:`: the PEM certificate presented (one the switch's CA trusts, e.g. svcflow's
    /// controller certificate).
    #[arg(long, value_name = "FILE")]
    pub ssl_certificate: Option<PathBuf>,
    /// TLS for `ssl:`: the PEM CA certificate(s) that must have signed the switch's
    /// certificate (e.g. ovs-pki's switchca/cacert.pem).
    #[arg(long, value_name = "FILE")]
    pub ssl_ca_cert: Option<PathBuf>,
}

impl SwitchArgs {
    /// The TLS files, if given (all three or none).
    pub fn tls(&self) -> Result<Option<TlsFiles>, ConfigError> {
        tls_files(
            self.ssl_private_key.clone(),
            self.ssl_certificate.clone(),
            self.ssl_ca_cert.clone(),
        )
    }
}

/// `--ssl-private-key`, `--ssl-certificate` and `--ssl-ca-cert`: all three, or none.
fn tls_files(
    private_key: Option<PathBuf>,
    certificate: Option<PathBuf>,
    ca_cert: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (private_key, certificate, ca_cert) {
        (Some(private_key), Some(certificate), Some(ca_cert)) => Ok(Some(TlsFiles {
            private_key,
            certificate,
            ca_cert,
        })),
        (None, None, None) => Ok(None),
        _ => Err(ConfigError(
            "TLS needs all three of --ssl-private-key, --ssl-certificate and --ssl-ca-cert".into(),
        )),
    }
}

/// `svcflow ofp print` arguments.
#[derive(Debug, Args)]
pub struct PrintArgs {
    /// Decode, re-encode and print the hex (in one lowercase run) instead of the text; fail
    /// if the re-encoding differs from the input.
    #[arg(long)]
    pub reencode: bool,
    /// Hex of one or more OpenFlow 1.3 messages; `-` or nothing reads stdin.
    #[arg(value_name = "HEX")]
    pub hex: Vec<String>,
}

/// `svcflow run` flags. Each has a key of the same name in the TOML file.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML file with any of the settings below, in kebab-case (e.g. `rest-listen = "127.0.0.1:8181"`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address switches connect to over OpenFlow [default: 127.0.0.1:6653].
    #[arg(long, value_name = "ADDR")]
    pub openflow_listen: Option<SocketAddr>,
    /// Address the nodes' bridges are told to dial, if not the listen address (needed when
    /// listening on 0.0.0.0 for remote nodes) [default: the listen address].
    #[arg(long, value_name = "ADDR")]
    pub openflow_advertise: Option<SocketAddr>,
    /// How pod traffic crosses between nodes: `geneve` or `vxlan` (each node's bridge gets a
    /// flow-based tunnel port; see `svcflow node-setup`), or `none` (the underlay routes every
    /// node's pod CIDR) [default: geneve].
    #[arg(long, value_name = "ENCAP")]
    pub encap: Option<String>,
    /// Datapath type of the bridges svcflow creates: `system` (kernel module) or `netdev`
    /// (userspace) [default: netdev].
    #[arg(long, value_name = "TYPE")]
    pub datapath_type: Option<String>,
    /// An OVSDB server to dial, as NODE=unix:PATH, NODE=tcp:IP:PORT or NODE=ssl:IP:PORT; repeat
    /// once per node.
    #[arg(long = "ovsdb-remote", value_name = "NODE=REMOTE")]
    pub ovsdb_remotes: Vec<String>,
    /// Listen for node ovsdb-servers pointed here with `ovs-vsctl set-manager tcp:ADDR`, or
    /// `ssl:ADDR` with TLS (passive mode).
    #[arg(long, value_name = "ADDR")]
    pub ovsdb_manager_listen: Option<SocketAddr>,
    /// Address of the REST northbound [default: 127.0.0.1:8181].
    #[arg(long, value_name = "ADDR")]
    pub rest_listen: Option<SocketAddr>,
    /// Address of the Prometheus `/metrics` endpoint [default: 127.0.0.1:10249, as
    /// kube-proxy].
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Address of `/healthz` and `/livez`, with kube-proxy's semantics [default:
    /// 127.0.0.1:10256].
    #[arg(long, value_name = "ADDR")]
    pub healthz_listen: Option<SocketAddr>,
    /// File of REST credentials (`basic USER PASSWORD` or `bearer TOKEN` lines). Without it auth
    /// is off, which is allowed only when the REST address is loopback.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// The service CIDR, routed from each node's host into br-int [default: 10.96.0.0/12].
    #[arg(long, value_name = "CIDR")]
    pub service_cidr: Option<Ipv4Net>,
    /// The IPv6 service CIDR of a dual-stack cluster, e.g. fd00:10:96::/112: routed from each
    /// node's host into br-int, and a new connection to an address in it that no service
    /// takes is refused [default: none].
    #[arg(long, value_name = "CIDR")]
    pub service_cidr6: Option<Ipv6Net>,
    /// MAC address of the virtual gateway that pods route through [default: 0a:58:0a:f4:00:01].
    #[arg(long, value_name = "MAC")]
    pub gateway_mac: Option<String>,
    /// Virtual IP that a pod reaching itself through a service is SNATed to [default: 169.254.0.253].
    #[arg(long, value_name = "IP")]
    pub loopback_ip: Option<Ipv4Addr>,
    /// Allowed NodePort range, LOW-HIGH [default: 30000-32767].
    #[arg(long, value_name = "LOW-HIGH")]
    pub node_port_range: Option<String>,
    /// Bucket weight of an endpoint on the node itself; remote endpoints weigh 1 [default: 1].
    #[arg(long, value_name = "N")]
    pub local_endpoint_weight: Option<u16>,
    /// Refused connection attempts (to a service without endpoints, or to an unserved address
    /// of the service CIDR) that one node's switch sends svcflow per second, through an
    /// OpenFlow meter that drops the rest; the burst is as many packets [default: 1000].
    #[arg(long, value_name = "PPS")]
    pub refuse_rate: Option<u32>,
    /// Directory for durable state (the REST model's write-ahead log) [default: /var/lib/svcflow].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where the REST state is kept: `local` (a write-ahead log in --state-dir), or
    /// `ovsdb:REMOTE[,REMOTE...]`, the `Svcflow` database of an ovsdb-server (a Raft cluster's
    /// members, e.g. `ovsdb:tcp:10.0.0.1:6641,tcp:10.0.0.2:6641,tcp:10.0.0.3:6641`), shared by
    /// every svcflow replica; see docs/store.md [default: local].
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
    /// Log level: error, warn, info, debug or trace [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// The node whose host this daemon runs on: svcflow then also configures the host side of
    /// that node's gateway port (its address, and routes for the service and pod CIDRs).
    #[arg(long, value_name = "NODE")]
    pub host_node: Option<String>,
    /// Watch Kubernetes (Services, EndpointSlices, Nodes, Pods, Namespaces) as an input:
    /// `in-cluster` (the pod's service account), `kubeconfig` (needs --kubeconfig) or `off`
    /// [default: off, or kubeconfig when --kubeconfig is given].
    #[arg(long, value_name = "MODE")]
    pub kubernetes: Option<String>,
    /// Watch Kubernetes with this kubeconfig file (its current context).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// REST mode: after a node's switch has been disconnected this many seconds, its endpoints
    /// leave the other nodes' groups until it is back; 0 means never [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub node_down_after: Option<u64>,
    /// Replicas (--store ovsdb:): a replica takes a node it is the preferred master of (by
    /// rendezvous hashing) once its connection to the node's switch has lasted this many
    /// seconds, and no sooner than this after the node last moved; see docs/ha.md
    /// [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub hold_down: Option<u64>,
    /// Replicas (--store ovsdb:): each bridge drops another replica's target once the switch
    /// has been disconnected from it this many seconds (a replica that left for good); 0
    /// keeps every target [default: 600].
    #[arg(long, value_name = "SECONDS")]
    pub replica_gone_after: Option<u64>,
    /// The longest a node's switch waits between attempts to dial svcflow (its Controller
    /// row's `max_backoff`; OVS's own default is 8): a restarted svcflow has every switch
    /// back within this long. 1 to 3600 [default: 1].
    #[arg(long, value_name = "SECONDS")]
    pub switch_max_backoff: Option<u64>,
    /// How replicas elect each switch's master: `ovsdb` (RFC 7047 locks on the --store
    /// ovsdb: database), `lease` (one coordination.k8s.io Lease per node; needs Kubernetes)
    /// or `off` (a single replica); see docs/ha.md [default: ovsdb with an ovsdb: store, else
    /// off].
    #[arg(long, value_name = "MODE")]
    pub election: Option<String>,
    /// --election lease: the namespace of the nodes' Leases [default: $POD_NAMESPACE, else
    /// default].
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// --election lease: how long a node's Lease lasts unrenewed; a dead master's nodes move
    /// after at most this long [default: 15].
    #[arg(long, value_name = "SECONDS")]
    pub lease_duration: Option<u64>,
    /// TLS: this daemon's PEM private key. With --ssl-certificate and --ssl-ca-cert (all three
    /// or none), every listener speaks TLS (OpenFlow and the OVSDB manager port require a
    /// client certificate the CA signed; REST, metrics and health are HTTPS), bridges are told
    /// to dial `ssl:`, and nodes' OVSDB servers are dialled over `ssl:`; a node's identity is
    /// its certificate's common name. See docs/security.md.
    #[arg(long, value_name = "FILE")]
    pub ssl_private_key: Option<PathBuf>,
    /// TLS: the PEM certificate presented to every peer (e.g. `ovs-pki -u req+sign svcflow
    /// controller`).
    #[arg(long, value_name = "FILE")]
    pub ssl_certificate: Option<PathBuf>,
    /// TLS: the PEM CA certificate(s) that must have signed every peer's certificate (e.g.
    /// ovs-pki's switchca/cacert.pem).
    #[arg(long, value_name = "FILE")]
    pub ssl_ca_cert: Option<PathBuf>,
    /// Allow plain TCP beyond loopback: listeners on other addresses without TLS, and `tcp:`
    /// OVSDB remotes and store members that are not loopback. Each such endpoint is logged as
    /// a warning. Without it, svcflow refuses to start with one.
    #[arg(long)]
    pub insecure: bool,
    /// Validate the configuration, print it, and exit.
    #[arg(long)]
    pub check: bool,
}

impl RunArgs {
    /// Merges defaults, the file (if any) and the flags, and validates the result.
    pub fn resolve(&self) -> Result<RunConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        self.merge(file)
    }

    fn merge(&self, file: FileConfig) -> Result<RunConfig, ConfigError> {
        let defaults = netvirt::config::Config::default();
        let mut pipeline = defaults.clone();
        if let Some(cidr) = self.service_cidr.or(file.service_cidr) {
            pipeline.service_cidr = cidr;
        }
        pipeline.service_cidr6 = self.service_cidr6.or(file.service_cidr6);
        if let Some(mac) = self.gateway_mac.as_ref().or(file.gateway_mac.as_ref()) {
            pipeline.gateway_mac = mac.parse().map_err(|e: netvirt::model::ModelError| {
                ConfigError(format!("gateway mac: {e}"))
            })?;
        }
        if let Some(ip) = self.loopback_ip.or(file.loopback_ip) {
            pipeline.loopback_ip = ip;
        }
        if let Some(range) = self
            .node_port_range
            .as_ref()
            .or(file.node_port_range.as_ref())
        {
            pipeline.node_port_range = parse_port_range(range)?;
        }
        if let Some(encap) = self.encap.as_ref().or(file.encap.as_ref()) {
            pipeline.encap = encap.parse().map_err(ConfigError)?;
        }
        if let Some(weight) = self.local_endpoint_weight.or(file.local_endpoint_weight) {
            if weight == 0 {
                return Err(ConfigError(
                    "local endpoint weight must be at least 1".into(),
                ));
            }
            pipeline.local_endpoint_weight = weight;
        }
        if let Some(rate) = self.refuse_rate.or(file.refuse_rate) {
            if rate == 0 {
                return Err(ConfigError("refuse rate must be at least 1".into()));
            }
            pipeline.refuse_rate = rate;
            pipeline.refuse_burst = rate;
        }
        let remotes = if self.ovsdb_remotes.is_empty() {
            file.ovsdb_remotes.unwrap_or_default()
        } else {
            self.ovsdb_remotes.clone()
        };
        let ovsdb_remotes = remotes
            .iter()
            .map(|r| parse_ovsdb_remote(r))
            .collect::<Result<Vec<_>, _>>()?;
        let rest_listen = self
            .rest_listen
            .or(file.rest_listen)
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8181)));
        let auth_file = self.auth_file.clone().or(file.auth_file);
        if auth_file.is_none() && !rest_listen.ip().is_loopback() {
            return Err(ConfigError(format!(
                "REST auth is off but the REST address {rest_listen} is not loopback; \
                 give --auth-file or listen on 127.0.0.1"
            )));
        }
        let log_level = parse_log_level(
            self.log_level
                .as_deref()
                .or(file.log_level.as_deref())
                .unwrap_or("info"),
        )?;
        // The flags decide together if either is given; else the file's keys do.
        let kubernetes = if self.kubernetes.is_some() || self.kubeconfig.is_some() {
            parse_kubernetes(self.kubernetes.as_deref(), self.kubeconfig.as_deref())?
        } else {
            parse_kubernetes(file.kubernetes.as_deref(), file.kubeconfig.as_deref())?
        };
        let store = match self.store.as_deref().or(file.store.as_deref()) {
            Some(text) => text.parse().map_err(ConfigError)?,
            None => coe::rest::StoreKind::Local,
        };
        let election = parse_election(
            self.election.as_deref().or(file.election.as_deref()),
            &store,
            kubernetes.is_some(),
            self.lease_namespace
                .as_deref()
                .or(file.lease_namespace.as_deref()),
            self.lease_duration.or(file.lease_duration).unwrap_or(15),
        )?;
        let tls = tls_files(
            self.ssl_private_key.clone().or(file.ssl_private_key),
            self.ssl_certificate.clone().or(file.ssl_certificate),
            self.ssl_ca_cert.clone().or(file.ssl_ca_cert),
        )?;
        let config = RunConfig {
            tls,
            insecure: self.insecure || file.insecure.unwrap_or(false),
            openflow_listen: self
                .openflow_listen
                .or(file.openflow_listen)
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 6653))),
            openflow_advertise: self.openflow_advertise.or(file.openflow_advertise),
            datapath_type: parse_datapath_type(
                self.datapath_type
                    .as_deref()
                    .or(file.datapath_type.as_deref())
                    .unwrap_or("netdev"),
            )?,
            ovsdb_remotes,
            ovsdb_manager_listen: self.ovsdb_manager_listen.or(file.ovsdb_manager_listen),
            rest_listen,
            metrics_listen: self
                .metrics_listen
                .or(file.metrics_listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 10249))),
            healthz_listen: self
                .healthz_listen
                .or(file.healthz_listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 10256))),
            auth_file,
            pipeline,
            state_dir: self
                .state_dir
                .clone()
                .or(file.state_dir)
                .unwrap_or_else(|| PathBuf::from("/var/lib/svcflow")),
            store,
            log_level,
            host_node: self.host_node.clone().or(file.host_node),
            kubernetes,
            node_down_after: std::time::Duration::from_secs(
                self.node_down_after.or(file.node_down_after).unwrap_or(30),
            ),
            hold_down: std::time::Duration::from_secs(
                self.hold_down.or(file.hold_down).unwrap_or(30),
            ),
            replica_gone_after: std::time::Duration::from_secs(
                self.replica_gone_after
                    .or(file.replica_gone_after)
                    .unwrap_or(600),
            ),
            switch_max_backoff: std::time::Duration::from_secs(parse_max_backoff(
                self.switch_max_backoff.or(file.switch_max_backoff),
            )?),
            election,
        };
        let exposed = crate::tls::policy::plain_beyond_loopback(&config);
        if !exposed.is_empty() && !config.insecure {
            return Err(ConfigError(format!(
                "plain TCP beyond loopback: {}; give --ssl-private-key, --ssl-certificate and \
                 --ssl-ca-cert (TLS; remotes as ssl:IP:PORT), or --insecure to allow it",
                exposed.join(", ")
            )));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(argv: &[&str]) -> RunArgs {
        let mut full = vec!["svcflow", "run"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Run(args) => args,
            Command::Ofp(_)
            | Command::NodeSetup(_)
            | Command::Store(_)
            | Command::Render(_)
            | Command::Plan(_)
            | Command::Get(_)
            | Command::Trace(_) => {
                unreachable!("svcflow run")
            }
        }
    }

    #[test]
    fn replicas_elect_over_the_shared_store_or_leases_and_say_what_is_missing() {
        use crate::config::ElectionMode;
        let election = |argv: &[&str]| {
            run_args(argv)
                .merge(FileConfig::default())
                .map(|c| c.election)
                .map_err(|e| e.to_string())
        };
        assert_eq!(election(&[]), Ok(ElectionMode::Off));
        assert_eq!(
            election(&["--store", "ovsdb:tcp:127.0.0.1:6641"]),
            Ok(ElectionMode::Ovsdb(vec!["tcp:127.0.0.1:6641".into()]))
        );
        assert_eq!(
            election(&[
                "--kubeconfig",
                "/k",
                "--election",
                "lease",
                "--lease-namespace",
                "svcflow",
                "--lease-duration",
                "4"
            ]),
            Ok(ElectionMode::Lease {
                namespace: "svcflow".into(),
                duration: std::time::Duration::from_secs(4)
            })
        );
        let file = FileConfig {
            kubeconfig: Some("/k".into()),
            election: Some("lease".into()),
            lease_namespace: Some("kube-system".into()),
            ..FileConfig::default()
        };
        let from_file = run_args(&[]).merge(file).unwrap().election;
        assert_eq!(
            from_file,
            ElectionMode::Lease {
                namespace: "kube-system".into(),
                duration: std::time::Duration::from_secs(15)
            }
        );
        for (argv, says) in [
            (&["--election", "lease"][..], "needs Kubernetes"),
            (&["--election", "ovsdb"][..], "needs the shared store"),
            (
                &["--election", "off", "--store", "ovsdb:tcp:127.0.0.1:1"][..],
                "must elect",
            ),
            (&["--election", "raft"][..], "expected off, ovsdb or lease"),
            (
                &[
                    "--kubeconfig",
                    "/k",
                    "--election",
                    "lease",
                    "--lease-duration",
                    "1",
                ][..],
                "at least 2 s",
            ),
            (
                &[
                    "--kubeconfig",
                    "/k",
                    "--election",
                    "lease",
                    "--lease-namespace",
                    "Bad_NS",
                ][..],
                "not a Kubernetes namespace name",
            ),
        ] {
            let err = election(argv).unwrap_err();
            assert!(err.contains(says), "{argv:?}: {err}");
        }
    }

    #[test]
    fn the_store_is_local_or_ovsdb_members() {
        let config = run_args(&[]).merge(FileConfig::default()).unwrap();
        assert_eq!(config.store, coe::rest::StoreKind::Local);
        let config = run_args(&["--store", "ovsdb:tcp:127.0.0.1:6641,unix:/run/svcflow.sock"])
            .merge(FileConfig::default())
            .unwrap();
        assert_eq!(
            config.store,
            coe::rest::StoreKind::Ovsdb(vec![
                "tcp:127.0.0.1:6641".into(),
                "unix:/run/svcflow.sock".into()
            ])
        );
        for bad in ["ovsdb:", "ovsdb:tcp:nowhere", "etcd:x"] {
            let err = run_args(&["--store", bad])
                .merge(FileConfig::default())
                .unwrap_err();
            assert!(err.to_string().contains("store"), "{bad}: {err}");
        }
    }

    #[test]
    fn defaults_bind_loopback_with_auth_off() {
        let config = run_args(&[]).merge(FileConfig::default()).unwrap();
        assert_eq!(config.openflow_listen.to_string(), "127.0.0.1:6653");
        assert_eq!(config.rest_listen.to_string(), "127.0.0.1:8181");
        assert_eq!(config.pipeline, netvirt::config::Config::default());
        assert_eq!(config.log_level, "info");
    }

    #[test]
    fn flags_override_the_file() {
        let file: FileConfig = toml::from_str(
            "rest-listen = \"127.0.0.1:9000\"\nnode-port-range = \"31000-31010\"\n\
             ovsdb-remotes = [\"n1=unix:/run/db.sock\"]\nlocal-endpoint-weight = 4\n",
        )
        .unwrap();
        let config = run_args(&[
            "--rest-listen",
            "127.0.0.2:8000",
            "--ovsdb-remote",
            "n2=tcp:127.0.0.1:6640",
        ])
        .merge(file)
        .unwrap();
        assert_eq!(config.rest_listen.to_string(), "127.0.0.2:8000");
        assert_eq!(config.pipeline.node_port_range, (31000, 31010));
        assert_eq!(config.pipeline.local_endpoint_weight, 4);
        assert_eq!(
            (config.pipeline.refuse_rate, config.pipeline.refuse_burst),
            (1000, 1000)
        );
        assert_eq!(config.ovsdb_remotes.len(), 1);
        assert_eq!(config.ovsdb_remotes[0].node, "n2");
    }

    #[test]
    fn the_refuse_rate_sets_the_refusal_meter() {
        let config = run_args(&["--refuse-rate", "50"])
            .merge(FileConfig::default())
            .unwrap();
        assert_eq!(
            (config.pipeline.refuse_rate, config.pipeline.refuse_burst),
            (50, 50)
        );
        assert!(
            run_args(&["--refuse-rate", "0"])
                .merge(FileConfig::default())
                .is_err()
        );
    }

    #[test]
    fn the_datapath_type_and_advertised_address_are_settable() {
        let config = run_args(&[]).merge(FileConfig::default()).unwrap();
        assert_eq!(
            (config.datapath_type.as_str(), config.openflow_advertise),
            ("netdev", None)
        );
        let config = run_args(&[
            "--datapath-type",
            "system",
            "--openflow-listen",
            "0.0.0.0:6653",
            "--openflow-advertise",
            "192.0.2.1:6653",
            "--insecure",
        ])
        .merge(FileConfig::default())
        .unwrap();
        assert_eq!(config.datapath_type, "system");
        assert_eq!(
            config.openflow_advertise.map(|a| a.to_string()).as_deref(),
            Some("192.0.2.1:6653")
        );
        let err = run_args(&["--datapath-type", "dpdk"])
            .merge(FileConfig::default())
            .unwrap_err();
        assert!(err.0.contains("`system` (kernel) or `netdev`"), "{err}");
    }

    #[test]
    fn the_switch_max_backoff_is_a_second_unless_set_from_1_to_3600() {
        let backoff = |argv: &[&str], file: FileConfig| {
            run_args(argv)
                .merge(file)
                .map(|c| c.switch_max_backoff.as_secs())
        };
        assert_eq!(backoff(&[], FileConfig::default()), Ok(1));
        assert_eq!(
            backoff(&["--switch-max-backoff", "8"], FileConfig::default()),
            Ok(8)
        );
        let file = FileConfig {
            switch_max_backoff: Some(5),
            ..FileConfig::default()
        };
        assert_eq!(backoff(&[], file), Ok(5));
        for bad in ["0", "3601"] {
            let err = backoff(&["--switch-max-backoff", bad], FileConfig::default()).unwrap_err();
            assert!(err.0.contains("from 1 to 3600"), "{err}");
        }
    }

    #[test]
    fn plain_tcp_beyond_loopback_needs_tls_or_insecure() {
        let merge = |argv: &[&str]| run_args(argv).merge(FileConfig::default());
        let err = merge(&["--openflow-listen", "10.0.0.1:6653"]).unwrap_err();
        assert_eq!(
            err.0,
            "plain TCP beyond loopback: OpenFlow listener 10.0.0.1:6653; give \
             --ssl-private-key, --ssl-certificate and --ssl-ca-cert (TLS; remotes as \
             ssl:IP:PORT), or --insecure to allow it"
        );
        let err = merge(&["--ovsdb-remote", "n1=tcp:10.0.0.2:6640"]).unwrap_err();
        assert!(err.0.contains("OVSDB remote n1=tcp:10.0.0.2:6640"), "{err}");
        let err = merge(&["--store", "ovsdb:tcp:10.0.0.3:6641"]).unwrap_err();
        assert!(err.0.contains("store member tcp:10.0.0.3:6641"), "{err}");
        let config = merge(&["--openflow-listen", "0.0.0.0:6653", "--insecure"]).unwrap();
        assert!(config.insecure && config.tls.is_none());
        let tls = [
            "--ssl-private-key",
            "/k",
            "--ssl-certificate",
            "/c",
            "--ssl-ca-cert",
            "/ca",
        ];
        let mut argv = vec![
            "--openflow-listen",
            "0.0.0.0:6653",
            "--ovsdb-manager-listen",
        ];
        argv.extend(["0.0.0.0:6640", "--ovsdb-remote", "n1=ssl:10.0.0.2:6640"]);
        argv.extend(tls);
        let config = merge(&argv).unwrap();
        assert_eq!(config.tls.map(|t| t.ca_cert), Some("/ca".into()));
        // TLS covers the listeners, not a `tcp:` remote.
        let mut argv = vec!["--ovsdb-remote", "n1=tcp:10.0.0.2:6640"];
        argv.extend(tls);
        assert!(merge(&argv).is_err());
        let err = merge(&["--ssl-private-key", "/k"]).unwrap_err();
        assert!(err.0.contains("all three"), "{err}");
    }

    #[test]
    fn auth_may_be_off_only_on_loopback() {
        let err = run_args(&["--rest-listen", "0.0.0.0:8181"])
            .merge(FileConfig::default())
            .unwrap_err();
        assert!(err.0.contains("not loopback"), "{err}");
        run_args(&[
            "--rest-listen",
            "0.0.0.0:8181",
            "--auth-file",
            "/etc/svcflow/auth",
            "--insecure",
        ])
        .merge(FileConfig::default())
        .unwrap();
    }

    #[test]
    fn kubernetes_is_off_in_cluster_or_a_kubeconfig() {
        let k = |argv: &[&str], file: &str| {
            run_args(argv)
                .merge(toml::from_str(file).unwrap())
                .map(|c| c.kubernetes)
        };
        assert_eq!(k(&[], ""), Ok(None));
        assert_eq!(
            k(&["--kubernetes", "in-cluster"], ""),
            Ok(Some(coe::k8s::Source::InCluster))
        );
        assert_eq!(
            k(&["--kubeconfig", "/k"], ""),
            Ok(Some(coe::k8s::Source::Kubeconfig("/k".into())))
        );
        assert_eq!(
            k(&[], "kubeconfig = \"/f\"\n"),
            Ok(Some(coe::k8s::Source::Kubeconfig("/f".into())))
        );
        assert_eq!(
            k(&["--kubernetes", "off"], "kubernetes = \"in-cluster\"\n"),
            Ok(None)
        );
        for (argv, wanted) in [
            (
                &["--kubernetes", "in-cluster", "--kubeconfig", "/k"][..],
                "not both",
            ),
            (&["--kubernetes", "kubeconfig"][..], "needs --kubeconfig"),
            (&["--kubernetes", "yes"][..], "expected in-cluster"),
        ] {
            let err = k(argv, "").unwrap_err();
            assert!(err.0.contains(wanted), "{argv:?}: {err}");
        }
    }

    #[test]
    fn ofp_print_takes_hex_words_and_reencode() {
        let cli =
            Cli::try_parse_from(["svcflow", "ofp", "print", "--reencode", "0414", "0008"]).unwrap();
        let Command::Ofp(OfpCommand::Print(args)) = cli.command else {
            panic!("not ofp print")
        };
        assert!(args.reencode);
        assert_eq!(args.hex, ["0414", "0008"]);
        let cli = Cli::try_parse_from(["svcflow", "ofp", "print", "-"]).unwrap();
        let Command::Ofp(OfpCommand::Print(args)) = cli.command else {
            panic!("not ofp print")
        };
        assert_eq!(args.hex, ["-"]);
    }

    #[test]
    fn ofp_dumps_take_all_three_tls_flags_or_none() {
        let dump = |extra: &[&str]| {
            let mut argv = vec!["svcflow", "ofp", "dump-flows", "ssl:10.0.0.1:6653"];
            argv.extend_from_slice(extra);
            let cli = Cli::try_parse_from(argv).unwrap();
            let Command::Ofp(OfpCommand::DumpFlows(args)) = cli.command else {
                panic!("not ofp dump-flows")
            };
            args.tls()
        };
        assert_eq!(dump(&[]).unwrap(), None);
        let all = dump(&[
            "--ssl-private-key",
            "k.pem",
            "--ssl-certificate",
            "c.pem",
            "--ssl-ca-cert",
            "ca.pem",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(all.ca_cert, PathBuf::from("ca.pem"));
        let err = dump(&["--ssl-certificate", "c.pem"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "TLS needs all three of --ssl-private-key, --ssl-certificate and --ssl-ca-cert"
        );
    }

    #[test]
    fn bad_values_name_what_is_wrong() {
        let cases: [(&[&str], &str); 5] = [
            (&["--node-port-range", "32767-30000"], "node port range"),
            (
                &["--ovsdb-remote", "n1=udp:1.2.3.4:6640"],
                "unix:PATH, tcp:IP:PORT or ssl:IP:PORT",
            ),
            (&["--ovsdb-remote", "unix:/x"], "NODE=unix:PATH"),
            (&["--gateway-mac", "0a:58"], "gateway mac"),
            (&["--log-level", "loud"], "log level"),
        ];
        for (argv, wanted) in cases {
            let err = run_args(argv).merge(FileConfig::default()).unwrap_err();
            assert!(err.0.contains(wanted), "{argv:?}: {err}");
        }
        assert!(toml::from_str::<FileConfig>("no-such-key = 1").is_err());
    }
}

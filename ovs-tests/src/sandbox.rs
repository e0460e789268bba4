//! The sandbox: one private OVS node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::host::{Host, HostSpec, netns_argv};
use crate::{SandboxError, cmd, netns};

/// How long a daemon may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a daemon may take to exit when asked.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The OVS schema installed by Debian's `openvswitch-common`.
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// Choices made when a sandbox starts.
#[derive(Debug, Clone, Default)]
pub struct SandboxOptions {
    /// Also let `ovsdb-server` listen with `ptcp` on a free loopback port.
    pub ovsdb_tcp: bool,
}

/// One private Open vSwitch node; see the crate docs.
#[derive(Debug)]
pub struct Sandbox {
    id: String,
    dir: PathBuf,
    node_netns: String,
    ovsdb: Option<Child>,
    vswitchd: Option<Child>,
    ovsdb_tcp_port: Option<u16>,
    hosts: Vec<Host>,
    extra_netns: Vec<String>,
}

impl Sandbox {
    /// Starts a sandbox with default options.
    pub fn start() -> Result<Self, SandboxError> {
        Self::start_with(SandboxOptions::default())
    }

    /// Starts `ovsdb-server` and `ovs-vswitchd` in a fresh temp dir and node namespace.
    pub fn start_with(options: SandboxOptions) -> Result<Self, SandboxError> {
        for (program, package) in [
            ("ovsdb-server", "openvswitch-switch"),
            ("ovs-vswitchd", "openvswitch-switch"),
            ("ovs-vsctl", "openvswitch-switch"),
            ("ovs-ofctl", "openvswitch-switch"),
            ("ovs-appctl", "openvswitch-switch"),
            ("ovsdb-tool", "openvswitch-switch"),
            ("ip", "iproute2"),
            ("ethtool", "ethtool"),
        ] {
            cmd::require_program(program, package)?;
        }
        if !Path::new(SCHEMA).is_file() {
            return Err(SandboxError::Missing {
                program: SCHEMA.to_string(),
                package: "openvswitch-common".to_string(),
            });
        }
        let temp_root = std::env::temp_dir();
        netns::reap_dead_sandboxes(&temp_root);

        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}-{}", netns::NETNS_PREFIX, std::process::id(), seq);
        let dir = temp_root.join(&id);
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["run", "db", "log", "etc"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let mut sandbox = Self {
            node_netns: id.clone(),
            id,
            dir,
            ovsdb: None,
            vswitchd: None,
            ovsdb_tcp_port: None,
            hosts: Vec::new(),
            extra_netns: Vec::new(),
        };
        // From here on, Drop cleans up whatever was made.
        cmd::run(&["ip", "netns", "add", &sandbox.node_netns])?;
        sandbox.node(&["ip", "link", "set", "dev", "lo", "up"])?;
        let db = sandbox.path("db/conf.db");
        cmd::run(&["ovsdb-tool", "create", &db, SCHEMA])?;
        if options.ovsdb_tcp {
            sandbox.ovsdb_tcp_port = Some(crate::cmd::try_free_port()?);
        }
        sandbox.start_ovsdb()?;
        sandbox.vsctl(&["--no-wait", "init"])?;
        sandbox.start_vswitchd()?;
        Ok(sandbox)
    }

    /// The sandbox's unique id; namespace and directory names derive from it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The sandbox's directory: `run/` (sockets), `db/`, `log/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's host network namespace, where `ovs-vswitchd` and the bridges' taps live.
    pub fn node_netns(&self) -> &str {
        &self.node_netns
    }

    /// The OVSDB unix socket, as an OVSDB remote: `unix:/…/run/db.sock`.
    pub fn db_remote(&self) -> String {
        format!("unix:{}", self.path("run/db.sock"))
    }

    /// The loopback port `ovsdb-server` listens on, if started with `ovsdb_tcp`.
    pub fn ovsdb_tcp_port(&self) -> Option<u16> {
        self.ovsdb_tcp_port
    }

    /// The OpenFlow management socket of `bridge`, as an `ovs-ofctl` target.
    pub fn mgmt_target(&self, bridge: &str) -> String {
        format!("unix:{}", self.path(&format!("run/{bridge}.mgmt")))
    }

    /// The hosts added so far.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    fn path(&self, relative: &str) -> String {
        self.dir.join(relative).to_string_lossy().into_owned()
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("OVS_RUNDIR", self.path("run")),
            ("OVS_DBDIR", self.path("db")),
            ("OVS_LOGDIR", self.path("log")),
            ("OVS_SYSCONFDIR", self.path("etc")),
        ]
    }

    fn run_ovs(&self, argv: &[&str]) -> Result<String, SandboxError> {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        cmd::run_env(argv, &env)
    }

    /// Runs `ovs-vsctl` against this sandbox's database.
    pub fn vsctl(&self, args: &[&str]) -> Result<String, SandboxError> {
        let db = format!("--db={}", self.db_remote());
        let mut argv = vec!["ovs-vsctl", "--timeout=20", db.as_str()];
        argv.extend_from_slice(args);
        self.run_ovs(&argv)
    }

    /// Runs `ovs-ofctl -O OpenFlow13 SUBCOMMAND <bridge's mgmt socket> ARGS…`.
    pub fn ofctl(
        &self,
        subcommand: &str,
        bridge: &str,
        args: &[&str],
    ) -> Result<String, SandboxError> {
        let target = self.mgmt_target(bridge);
        let mut argv = vec!["ovs-ofctl", "-O", "OpenFlow13", subcommand, target.as_str()];
        argv.extend_from_slice(args);
        self.run_ovs(&argv)
    }

    /// Runs `ovs-appctl` against `ovs-vswitchd`.
    pub fn appctl(&self, args: &[&str]) -> Result<String, SandboxError> {
        let ctl = self.path("run/ovs-vswitchd.ctl");
        let mut argv = vec!["ovs-appctl", "--timeout=20", "-t", ctl.as_str()];
        argv.extend_from_slice(args);
        self.run_ovs(&argv)
    }

    /// Runs `svcflow-probe connect` from the node's own host stack (see [`Host::connect`]).
    pub fn connect_from_node(
        &self,
        proto: &str,
        target: &str,
        count: u32,
        extra: &[&str],
    ) -> Result<Vec<crate::Attempt>, SandboxError> {
        crate::host::probe_connect(&self.node_netns, proto, target, count, extra)
    }

    /// Starts `svcflow-probe serve NAME LISTENS…` on the node's own host stack (see
    /// [`Host::serve`]); it is killed when the [`crate::host::Process`] drops.
    pub fn serve_on_node(
        &self,
        name: &str,
        listens: &[&str],
    ) -> Result<crate::host::Process, SandboxError> {
        crate::host::probe_serve(&self.node_netns, name, listens)
    }

    /// Drops every TCP packet to or from `port` on the node namespace's loopback (where the
    /// switch reaches its controllers), or (`cut` false) stops dropping. (This kernel has
    /// neither `gact` nor `prio`: an ingress `tc` filter redirects the packets to an `ifb`
    /// device `ofcut` that is down, which drops them.) One port at a time.
    pub fn cut_tcp_port(&self, port: u16, cut: bool) -> Result<(), SandboxError> {
        self.cut_tcp_port_on("lo", port, cut)
    }

    /// [`Sandbox::cut_tcp_port`] for the packets the node namespace receives on `dev` (a lab
    /// node's management port, where its switch reaches the controllers).
    pub fn cut_tcp_port_on(&self, dev: &str, port: u16, cut: bool) -> Result<(), SandboxError> {
        if cut {
            self.node(&["ip", "link", "add", "ofcut", "type", "ifb"])?;
            self.node(&["tc", "qdisc", "add", "dev", dev, "ingress"])?;
            let port = port.to_string();
            for direction in ["dport", "sport"] {
                self.node(&[
                    "tc", "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "ip", "u32",
                    "match", "ip", direction, &port, "0xffff", "action", "mirred", "egress",
                    "redirect", "dev", "ofcut",
                ])?;
            }
        } else {
            self.node(&["tc", "qdisc", "del", "dev", dev, "ingress"])?;
            self.node(&["ip", "link", "del", "ofcut"])?;
        }
        Ok(())
    }

    /// Runs a command in the node's host namespace.
    pub fn node(&self, argv: &[&str]) -> Result<String, SandboxError> {
        cmd::run(&netns_argv(&self.node_netns, argv))
    }

    fn start_ovsdb(&mut self) -> Result<(), SandboxError> {
        let db = self.path("db/conf.db");
        let mut args = vec![
            db,
            format!("--remote=punix:{}", self.path("run/db.sock")),
            // Honour `ovs-vsctl set-manager` and `set-ssl`, as a packaged OVS does.
            "--remote=db:Open_vSwitch,Open_vSwitch,manager_options".to_string(),
            "--private-key=db:Open_vSwitch,SSL,private_key".to_string(),
            "--certificate=db:Open_vSwitch,SSL,certificate".to_string(),
            "--ca-cert=db:Open_vSwitch,SSL,ca_cert".to_string(),
            format!("--pidfile={}", self.path("run/ovsdb-server.pid")),
            format!("--unixctl={}", self.path("run/ovsdb-server.ctl")),
            format!("--log-file={}", self.path("log/ovsdb-server.log")),
            "--no-chdir".to_string(),
            "-vconsole:off".to_string(),
        ];
        if let Some(port) = self.ovsdb_tcp_port {
            args.push(format!("--remote=ptcp:{port}:127.0.0.1"));
        }
        let child = self.spawn_daemon("ovsdb-server", &args, None)?;
        self.ovsdb = Some(child);
        let socket = self.dir.join("run/db.sock");
        let ctl = self.path("run/ovsdb-server.ctl");
        self.wait_daemon_ready("ovsdb-server", "log/ovsdb-server.log", |s| {
            socket.exists() && s.run_ovs(&["ovs-appctl", "-t", &ctl, "version"]).is_ok()
        })
    }

    /// Starts `ovs-vswitchd` in the node namespace (again, after [`Sandbox::stop_vswitchd`]).
    pub fn start_vswitchd(&mut self) -> Result<(), SandboxError> {
        if self.vswitchd.is_some() {
            return Err(SandboxError::Invalid(
                "ovs-vswitchd is already running".into(),
            ));
        }
        let args = vec![
            self.db_remote(),
            format!("--pidfile={}", self.path("run/ovs-vswitchd.pid")),
            format!("--unixctl={}", self.path("run/ovs-vswitchd.ctl")),
            format!("--log-file={}", self.path("log/ovs-vswitchd.log")),
            "--no-chdir".to_string(),
            "-vconsole:off".to_string(),
        ];
        let netns = self.node_netns.clone();
        let child = self.spawn_daemon("ovs-vswitchd", &args, Some(&netns))?;
        self.vswitchd = Some(child);
        self.wait_daemon_ready("ovs-vswitchd", "log/ovs-vswitchd.log", |s| {
            s.appctl(&["version"]).is_ok()
        })?;
        // Wait until it has read the database and built every bridge it holds.
        // (Without --no-wait, ovs-vsctl returns once ovs-vswitchd has applied the change.)
        let mark = format!("external_ids:svcflow-sandbox={}", self.id);
        self.vsctl(&["set", "Open_vSwitch", ".", &mark])?;
        // And until each bridge's management socket answers: it can lag the bridge itself
        // (seen once: `ovs-ofctl dump-flows` refused right after a restart).
        let bridges = self.vsctl(&["list-br"])?;
        for bridge in bridges.lines().map(str::trim).filter(|b| !b.is_empty()) {
            let bridge = bridge.to_string();
            self.wait_daemon_ready("ovs-vswitchd", "log/ovs-vswitchd.log", |s| {
                s.ofctl("show", &bridge, &[]).is_ok()
            })?;
        }
        Ok(())
    }

    /// Stops `ovs-vswitchd`. `graceful` asks it to exit and clean up its datapath; otherwise it
    /// is killed with SIGKILL, as in a crash. Either way every flow and group is lost.
    pub fn stop_vswitchd(&mut self, graceful: bool) -> Result<(), SandboxError> {
        let Some(child) = self.vswitchd.take() else {
            return Ok(());
        };
        if graceful {
            let _ = self.appctl(&["exit", "--cleanup"]);
        }
        stop_child(
            child,
            if graceful {
                STOP_TIMEOUT
            } else {
                Duration::ZERO
            },
        )
    }

    /// Kills and restarts `ovs-vswitchd`, as after a crash.
    pub fn restart_vswitchd(&mut self) -> Result<(), SandboxError> {
        self.stop_vswitchd(false)?;
        self.start_vswitchd()
    }

    /// Stops and restarts `ovsdb-server`, keeping its database.
    pub fn restart_ovsdb(&mut self) -> Result<(), SandboxError> {
        if let Some(child) = self.ovsdb.take() {
            stop_child(child, Duration::ZERO)?;
        }
        let _ = std::fs::remove_file(self.dir.join("run/db.sock"));
        self.start_ovsdb()
    }

    fn spawn_daemon(
        &self,
        program: &str,
        args: &[String],
        netns: Option<&str>,
    ) -> Result<Child, SandboxError> {
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = netns {
            argv.extend(["ip", "netns", "exec", ns]);
        }
        argv.push(program);
        argv.extend(args.iter().map(String::as_str));
        let (first, rest) = argv.split_first().ok_or(SandboxError::EmptyCommand)?;
        Command::new(first)
            .args(rest)
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: program.to_string(),
                source,
            })
    }

    fn wait_daemon_ready(
        &mut self,
        daemon: &str,
        log: &str,
        ready: impl Fn(&Self) -> bool,
    ) -> Result<(), SandboxError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready(self) {
                return Ok(());
            }
            let child = if daemon == "ovsdb-server" {
                self.ovsdb.as_mut()
            } else {
                self.vswitchd.as_mut()
            };
            let exited = child.is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                return Err(SandboxError::DaemonExited {
                    daemon: daemon.to_string(),
                    log_tail: self.log_tail(log, 20),
                });
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Timeout {
                    what: format!("{daemon} to start (log: {})", self.path(log)),
                    after: START_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `lines` lines of a log under the sandbox dir, e.g. `log/ovs-vswitchd.log`.
    pub fn log_tail(&self, log: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Adds a bridge with the userspace datapath, OpenFlow 1.3 and fail mode secure.
    pub fn add_bridge(&self, name: &str) -> Result<(), SandboxError> {
        check_ifname(name)?;
        self.vsctl(&[
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
        ])?;
        Ok(())
    }

    /// Adds a host: a namespace whose `eth0` is a veth attached to `bridge` on `spec.ofport`.
    pub fn add_host(&mut self, bridge: &str, spec: HostSpec) -> Result<Host, SandboxError> {
        check_ifname(&spec.name)?;
        if spec.name == "eth0" || self.hosts.iter().any(|h| h.spec.name == spec.name) {
            return Err(SandboxError::Invalid(format!(
                "host name `{}` is taken",
                spec.name
            )));
        }
        let host = Host {
            netns: format!("{}-{}", self.id, spec.name),
            bridge: bridge.to_string(),
            spec,
        };
        cmd::run(&["ip", "netns", "add", &host.netns])?;
        self.extra_netns.push(host.netns.clone());
        let port = host.port_name().to_string();
        self.node(&[
            "ip",
            "link",
            "add",
            "name",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &host.netns,
        ])?;
        host.run(&["ip", "link", "set", "dev", "eth0", "address", host.mac()])?;
        if !host.spec.ip.is_empty() {
            host.run(&["ip", "addr", "add", &host.spec.ip, "dev", "eth0"])?;
        }
        host.run(&["ip", "link", "set", "dev", "eth0", "up"])?;
        host.run(&["ip", "link", "set", "dev", "lo", "up"])?;
        // The userspace datapath does not complete partial checksums.
        host.run(&["ethtool", "-K", "eth0", "tx", "off"])?;
        if let Some(gateway) = &host.spec.gateway {
            host.run(&[
                "ip", "route", "add", "default", "via", gateway, "dev", "eth0",
            ])?;
        }
        if let Some(ip6) = &host.spec.ip6 {
            // IPv6 in the namespace, without duplicate address detection (the switch answers
            // neighbour solicitations for the gateway, and drops DAD's).
            for knob in ["all", "default", "eth0"] {
                host.run(&[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{knob}.disable_ipv6=0"),
                ])?;
            }
            host.run(&["ip", "-6", "addr", "add", ip6, "dev", "eth0", "nodad"])?;
            if let Some(gateway6) = &host.spec.gateway6 {
                host.run(&[
                    "ip", "-6", "route", "add", "default", "via", gateway6, "dev", "eth0",
                ])?;
            }
        }
        // The node's own stack must not answer for packets that OVS reads from this veth.
        self.node(&["ip", "link", "set", "dev", &port, "up", "arp", "off"])?;
        self.node(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{port}.disable_ipv6=1"),
        ])?;
        let ofport = host.ofport().to_string();
        self.vsctl(&[
            "add-port",
            bridge,
            &port,
            "--",
            "set",
            "interface",
            &port,
            &format!("ofport_request={ofport}"),
        ])?;
        let assigned = self.vsctl(&["get", "interface", &port, "ofport"])?;
        if assigned.trim() != ofport {
            return Err(SandboxError::Invalid(format!(
                "port {port} got ofport {} instead of {ofport}",
                assigned.trim()
            )));
        }
        self.hosts.push(host.clone());
        Ok(host)
    }

    /// Adds an internal port (a tap in the node namespace) and brings it up.
    pub fn add_internal_port(
        &self,
        bridge: &str,
        name: &str,
        ofport: u16,
    ) -> Result<(), SandboxError> {
        self.add_internal_port_with(bridge, name, ofport, &[])
    }

    /// Adds an internal port with extra Interface columns (e.g. `mac="0a:58:00:00:00:02"`).
    pub fn add_internal_port_with(
        &self,
        bridge: &str,
        name: &str,
        ofport: u16,
        columns: &[&str],
    ) -> Result<(), SandboxError> {
        check_ifname(name)?;
        let ofport_request = format!("ofport_request={ofport}");
        let mut args = vec![
            "add-port",
            bridge,
            name,
            "--",
            "set",
            "interface",
            name,
            "type=internal",
            &ofport_request,
        ];
        args.extend_from_slice(columns);
        self.vsctl(&args)?;
        self.node(&["ip", "link", "set", "dev", name, "up"])?;
        Ok(())
    }

    /// `ovs-ofctl dump-flows` without statistics, one flow per line.
    pub fn dump_flows(&self, bridge: &str) -> Result<String, SandboxError> {
        self.ofctl("dump-flows", bridge, &["--no-stats"])
    }

    /// Each flow on `bridge` (its `ovs-ofctl dump-flows` text without statistics) with its
    /// age in seconds.
    pub fn flow_ages(&self, bridge: &str) -> Result<BTreeMap<String, f64>, SandboxError> {
        let stats = self.flow_stats(bridge)?;
        Ok(stats.into_iter().map(|(f, (age, _))| (f, age)).collect())
    }

    /// Each flow on `bridge` (its `ovs-ofctl dump-flows` text without statistics) with its
    /// age in seconds and its packet count.
    pub fn flow_stats(&self, bridge: &str) -> Result<BTreeMap<String, (f64, u64)>, SandboxError> {
        let text = self.ofctl("dump-flows", bridge, &[])?;
        let mut flows = BTreeMap::new();
        // Skip the reply header, which carries an xid.
        for line in text
            .lines()
            .filter(|l| l.trim_start().starts_with("cookie="))
        {
            let (mut duration, mut packets) = (None, None);
            let mut key = Vec::new();
            for field in line.trim().split(", ") {
                if let Some(d) = field.strip_prefix("duration=") {
                    duration = d.trim_end_matches('s').parse::<f64>().ok();
                } else if let Some(n) = field.strip_prefix("n_packets=") {
                    packets = n.parse::<u64>().ok();
                } else if !["n_bytes=", "idle_age=", "hard_age="]
                    .iter()
                    .any(|p| field.starts_with(p))
                {
                    key.push(field);
                }
            }
            let (Some(duration), Some(packets)) = (duration, packets) else {
                return Err(SandboxError::Invalid(format!(
                    "cannot read the statistics of `{line}`"
                )));
            };
            flows.insert(key.join(", "), (duration, packets));
        }
        Ok(flows)
    }

    /// The packets counted by the flows on `bridge` whose `ovs-ofctl dump-flows` line
    /// `matches`, once the count has settled: each read first waits for a full revalidation
    /// round (`revalidator/wait`), since `ovs-vswitchd` moves a datapath flow's packets into
    /// its OpenFlow rules' counters only then, and the count must hold for a second. Traffic
    /// still in flight, or counted but not yet pushed, would otherwise land on either side
    /// of a before/after comparison.
    pub fn settled_packets(
        &self,
        bridge: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<u64, SandboxError> {
        let read = || -> Result<u64, SandboxError> {
            self.appctl(&["revalidator/wait"])?;
            let text = self.ofctl("dump-flows", bridge, &[])?;
            let mut sum = 0;
            for line in text.lines().filter(|l| matches(l)) {
                let packets = line
                    .split("n_packets=")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| SandboxError::Invalid(format!("no packet count in `{line}`")))?;
                sum += packets;
            }
            Ok(sum)
        };
        let mut failure = None;
        let settled = cmd::wait_stable(
            &format!("the packet count on {bridge} to settle"),
            Duration::from_secs(15),
            Duration::from_secs(1),
            || match read() {
                Ok(n) => Some(n),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            },
        );
        match (settled, failure) {
            (Ok(n), _) => Ok(n),
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err(e),
        }
    }

    /// Waits (up to `timeout`) until a flow on `bridge` contains `text`.
    pub fn wait_for_flow(
        &self,
        bridge: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<(), SandboxError> {
        cmd::wait_for(&format!("a flow with {text} on {bridge}"), timeout, || {
            self.dump_flows(bridge)
                .ok()
                .filter(|f| f.contains(text))
                .map(|_| ())
        })
    }

    /// Each controller target of the switch with its role as ovs-vswitchd reports it
    /// (`master`, `slave`, `other`, or empty before its first status refresh).
    pub fn controller_roles(&self) -> BTreeMap<String, String> {
        let out = self
            .vsctl(&[
                "--format=csv",
                "--data=bare",
                "--no-headings",
                "--columns=target,role",
                "list",
                "controller",
            ])
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split_once(','))
            .map(|(t, r)| (t.trim_matches('"').to_string(), r.trim().to_string()))
            .collect()
    }

    /// `ovs-ofctl dump-groups`.
    pub fn dump_groups(&self, bridge: &str) -> Result<String, SandboxError> {
        self.ofctl("dump-groups", bridge, &[])
    }

    /// Installs flows from `ovs-ofctl` text, one per entry, in one bundle.
    pub fn add_flows(&self, bridge: &str, flows: &[&str]) -> Result<(), SandboxError> {
        self.ofctl_file("add-flows", bridge, &flows.join("\n"))
    }

    /// Installs groups from `ovs-ofctl` text, one per entry, in one bundle.
    pub fn add_groups(&self, bridge: &str, groups: &[&str]) -> Result<(), SandboxError> {
        self.ofctl_file("add-groups", bridge, &groups.join("\n"))
    }

    /// Runs an `ovs-ofctl bundle` file (lines such as `flow add …`, `group delete …`) as one
    /// atomic bundle.
    pub fn ofctl_bundle(&self, bridge: &str, lines: &[String]) -> Result<(), SandboxError> {
        let file = self.dir.join("bundle.txt");
        std::fs::write(&file, format!("{}\n", lines.join("\n")))?;
        let file = file.to_string_lossy().into_owned();
        self.ofctl("bundle", bridge, &[&file]).map(|_| ())
    }

    fn ofctl_file(&self, subcommand: &str, bridge: &str, text: &str) -> Result<(), SandboxError> {
        let file = self.dir.join(format!("{subcommand}.txt"));
        std::fs::write(&file, format!("{text}\n"))?;
        let file = file.to_string_lossy().into_owned();
        self.ofctl(subcommand, bridge, &["--bundle", &file])
            .map(|_| ())
    }

    /// The userspace datapath's conntrack table, optionally for one zone.
    pub fn dump_conntrack(&self, zone: Option<u16>) -> Result<String, SandboxError> {
        match zone {
            Some(zone) => self.appctl(&["dpctl/dump-conntrack", &format!("zone={zone}")]),
            None => self.appctl(&["dpctl/dump-conntrack"]),
        }
    }

    /// `ofproto/trace BRIDGE FLOW EXTRA…`, e.g. `--ct-next trk,new`.
    pub fn trace(&self, bridge: &str, flow: &str, extra: &[&str]) -> Result<String, SandboxError> {
        let mut args = vec!["ofproto/trace", bridge, flow];
        args.extend_from_slice(extra);
        self.appctl(&args)
    }

    /// Points `bridge` at a controller (`unix:PATH`, `tcp:IP:PORT`, `ptcp:PORT`), out of band.
    pub fn set_controller(&self, bridge: &str, target: &str) -> Result<(), SandboxError> {
        self.vsctl(&[
            "set-controller",
            bridge,
            target,
            "--",
            "set",
            "controller",
            bridge,
            "connection-mode=out-of-band",
        ])
        .map(|_| ())
    }

    /// The process id of this sandbox's `ovs-vswitchd`, from its pidfile (none if it never
    /// ran).
    pub fn vswitchd_pid(&self) -> Option<u32> {
        read_pid(&self.dir.join("run/ovs-vswitchd.pid"))
    }

    /// The process ids of this sandbox's daemons that are still running.
    pub fn daemon_pids(&self) -> Vec<u32> {
        [&self.ovsdb, &self.vswitchd]
            .into_iter()
            .flatten()
            .map(Child::id)
            .collect()
    }

    fn teardown(&mut self) {
        for ns in &self.extra_netns {
            netns::kill_all_in(ns);
        }
        if let Err(e) = self.stop_vswitchd(true) {
            eprintln!("sandbox {}: stopping ovs-vswitchd: {e}", self.id);
        }
        netns::kill_all_in(&self.node_netns);
        if let Some(child) = self.ovsdb.take() {
            let ctl = self.path("run/ovsdb-server.ctl");
            let _ = self.run_ovs(&["ovs-appctl", "--timeout=5", "-t", &ctl, "exit"]);
            if let Err(e) = stop_child(child, STOP_TIMEOUT) {
                eprintln!("sandbox {}: stopping ovsdb-server: {e}", self.id);
            }
        }
        for ns in self.extra_netns.drain(..) {
            netns::delete(&ns);
        }
        netns::delete(&self.node_netns);
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "sandbox {} torn down after a panic; ovs-vswitchd log tail:\n{}",
                self.id,
                self.log_tail("log/ovs-vswitchd.log", 15)
            );
        }
        self.teardown();
        if panicking || std::env::var_os("SVCFLOW_KEEP_SANDBOX").is_some() {
            eprintln!("sandbox {}: logs kept in {}", self.id, self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Waits up to `grace` for a child to exit, then kills it, and always reaps it.
fn stop_child(mut child: Child, grace: Duration) -> Result<(), SandboxError> {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait()?;
    Ok(())
}

fn check_ifname(name: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Invalid(format!(
            "`{name}` is not a valid interface name (1-15 of [A-Za-z0-9_-])"
        )))
    }
}

/// The process id a pidfile holds.
pub(crate) fn read_pid(path: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

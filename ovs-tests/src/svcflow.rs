//! Running the `svcflow` daemon inside a sandbox's node namespace, and talking to its REST
//! northbound there with `curl`.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::cmd::free_port;
use crate::{Sandbox, SandboxError, cmd};

/// Where `svcflow run` listens for switches, inside the node namespace.
pub const OPENFLOW: &str = "127.0.0.1:6653";
/// Where its REST northbound listens, inside the node namespace.
pub const REST: &str = "127.0.0.1:8181";
/// The RESTCONF config root.
pub const NB: &str = "http://127.0.0.1:8181/restconf/config";

/// The value of the sample `name` (with its labels, as printed) in a scrape of the daemon's
/// `/metrics`.
pub fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `$SVCFLOW_BIN`, or `svcflow` next to the running binary's directory, as Cargo lays it out.
/// Cargo does not build it for `ovs-tests`: `scripts/test.sh` runs `cargo build -p svcflow`.
pub fn svcflow_binary() -> Result<PathBuf, SandboxError> {
    if let Some(path) = std::env::var_os("SVCFLOW_BIN") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("svcflow"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            SandboxError::Invalid(format!(
                "the svcflow binary was not found next to {}: run `cargo build -p svcflow` \
                 first (scripts/test.sh does), or set SVCFLOW_BIN",
                exe.display()
            ))
        })
}

/// `svcflow run` in the node namespace, for node `n1` on the sandbox's OVSDB, configuring
/// n1's host side (`--host-node n1`, since it runs there); killed on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts the daemon; run `n` names its log, `<sandbox>/svcflow-<n>.log`. Its state lives
    /// in `<sandbox>/state`, so a second start finds the first one's state.
    pub fn start(sb: &Sandbox, n: u32, log_level: &str) -> Result<Daemon, SandboxError> {
        Self::start_with(sb, n, log_level, &[])
    }

    /// The same with more flags (e.g. `--store`).
    pub fn start_with(
        sb: &Sandbox,
        n: u32,
        log_level: &str,
        more: &[&str],
    ) -> Result<Daemon, SandboxError> {
        let mut args = vec!["--log-level", log_level, "--host-node", "n1"];
        args.extend_from_slice(more);
        Self::start_node(sb, n, &args)
    }

    /// Starts the daemon in the node's namespace for node `n1` on the sandbox's OVSDB, on the
    /// usual OpenFlow and REST addresses, with no overlay (other nodes sit behind the uplink's
    /// routed next hop), and `more` flags.
    fn start_node(sb: &Sandbox, n: u32, more: &[&str]) -> Result<Daemon, SandboxError> {
        Self::start_as(sb, n, "n1", more)
    }

    /// As [`Daemon::start_node`], with the sandbox's switch as node `node`.
    pub fn start_as(
        sb: &Sandbox,
        n: u32,
        node: &str,
        more: &[&str],
    ) -> Result<Daemon, SandboxError> {
        let remote = format!("{node}={}", sb.db_remote());
        let mut args = vec![
            "--openflow-listen",
            OPENFLOW,
            "--rest-listen",
            REST,
            "--ovsdb-remote",
            &remote,
            "--encap",
            "none",
        ];
        args.extend_from_slice(more);
        Self::spawn(sb, n, Some(sb.node_netns()), &args)
    }

    /// Starts the daemon in the test's own namespace, listening for node `ovsdb-server`s
    /// pointed at it with `set-manager` (passive OVSDB), on free loopback ports. Returns it
    /// with its OpenFlow and manager ports.
    pub fn start_manager(sb: &Sandbox, n: u32) -> Result<(Daemon, u16, u16), SandboxError> {
        let (openflow, rest, manager) = (free_port(), free_port(), free_port());
        let args = [
            format!("--openflow-listen=127.0.0.1:{openflow}"),
            format!("--rest-listen=127.0.0.1:{rest}"),
            format!("--ovsdb-manager-listen=127.0.0.1:{manager}"),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Ok((Self::spawn(sb, n, None, &args)?, openflow, manager))
    }

    /// Starts the daemon in the node's namespace watching Kubernetes through `kubeconfig`
    /// (written into the sandbox's directory from `kubeconfig_text`), as [`Daemon::start_node`]
    /// does, with `more` flags.
    pub fn start_kube(
        sb: &Sandbox,
        n: u32,
        kubeconfig_text: &str,
        more: &[&str],
    ) -> Result<Daemon, SandboxError> {
        let kubeconfig = sb.dir().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text)?;
        let kubeconfig = kubeconfig.to_string_lossy().to_string();
        let mut args = vec!["--kubeconfig", &kubeconfig];
        args.extend_from_slice(more);
        Self::start_node(sb, n, &args)
    }

    /// Starts `svcflow run ARGS --state-dir <sandbox>/state` in `netns`, or in the test's own
    /// network namespace when `None`.
    pub fn spawn(
        sb: &Sandbox,
        n: u32,
        netns: Option<&str>,
        args: &[&str],
    ) -> Result<Daemon, SandboxError> {
        Self::spawn_with_state(sb, n, netns, args, &sb.dir().join("state"))
    }

    /// [`Daemon::spawn`] with its own `--state-dir` (replicas that each keep a local store).
    pub fn spawn_with_state(
        sb: &Sandbox,
        n: u32,
        netns: Option<&str>,
        args: &[&str],
        state_dir: &std::path::Path,
    ) -> Result<Daemon, SandboxError> {
        let log = sb.dir().join(format!("svcflow-{n}.log"));
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(svcflow_binary()?);
                c
            }
            None => Command::new(svcflow_binary()?),
        };
        let child = command
            .arg("run")
            .args(args)
            .arg("--state-dir")
            .arg(state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: "svcflow".into(),
                source,
            })?;
        Ok(Daemon {
            child: Some(child),
            log,
        })
    }

    /// What the daemon has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to 10 s for the exit.
    pub fn terminate(&mut self) -> Result<ExitStatus, SandboxError> {
        let Some(mut child) = self.child.take() else {
            return Err(SandboxError::Invalid("the daemon is not running".into()));
        };
        cmd::run(&["kill", "-TERM", &child.id().to_string()])?;
        let exited = cmd::wait_for("svcflow to exit", Duration::from_secs(10), || {
            child.try_wait().ok().flatten()
        });
        if exited.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        exited
    }

    /// The daemon's process id while it runs (`ip netns exec` execs it, so this is svcflow's
    /// own), or `None` once it was stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (a `kill` name such as `STOP` or `CONT`) to the running daemon.
    pub fn signal(&self, signal: &str) -> Result<(), SandboxError> {
        let pid = self
            .pid()
            .ok_or_else(|| SandboxError::Invalid("the daemon is not running".into()))?;
        cmd::run(&["kill", &format!("-{signal}"), &pid.to_string()]).map(|_| ())
    }

    /// Every sync the daemon has logged so far, in order.
    pub fn syncs(&self) -> Vec<SyncLine> {
        self.log().lines().filter_map(SyncLine::parse).collect()
    }

    /// Kills the daemon (SIGKILL), as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One logged sync: `node N: synced model revision R: A flows added, M modified, D deleted,
/// G groups changed (F flows, H groups desired)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncLine {
    /// The model revision synced.
    pub revision: u64,
    /// Flows added.
    pub added: u64,
    /// Flows modified in place.
    pub modified: u64,
    /// Flows deleted.
    pub deleted: u64,
    /// Groups added, modified or deleted.
    pub groups_changed: u64,
    /// Flows desired.
    pub flows: u64,
    /// Groups desired.
    pub groups: u64,
}

impl SyncLine {
    /// Reads one daemon log line, if it reports a sync.
    pub fn parse(line: &str) -> Option<SyncLine> {
        let (_, rest) = line.split_once(": synced model revision ")?;
        let numbers: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| !w.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let [
            revision,
            added,
            modified,
            deleted,
            groups_changed,
            flows,
            groups,
        ] = numbers[..]
        else {
            return None;
        };
        Some(SyncLine {
            revision,
            added,
            modified,
            deleted,
            groups_changed,
            flows,
            groups,
        })
    }
}

/// `curl -X METHOD <NB>/PATH [-d BODY]` in the node namespace; fails on an HTTP error.
pub fn rest(sb: &Sandbox, method: &str, path: &str, body: &str) -> Result<String, SandboxError> {
    rest_to(sb, NB, method, path, body)
}

/// [`rest`] to the REST server on loopback port `port` of the node namespace.
pub fn rest_on(
    sb: &Sandbox,
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> Result<String, SandboxError> {
    let base = format!("http://127.0.0.1:{port}/restconf/config");
    rest_to(sb, &base, method, path, body)
}

/// What changed on a switch between two readings of its flows' ages ([`Sandbox::flow_ages`])
/// taken `elapsed` seconds apart: each flow added, removed, or installed again (younger than
/// its age at the first reading plus `elapsed`, with 1.5 s of slack for the readings
/// themselves). Empty when no flow was touched.
pub fn flows_touched(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    elapsed: f64,
) -> Vec<String> {
    let mut touched: Vec<String> = before
        .keys()
        .filter(|f| !after.contains_key(*f))
        .map(|f| format!("removed: {f}"))
        .collect();
    for (flow, now) in after {
        match before.get(flow) {
            None => touched.push(format!("added: {flow}")),
            Some(age) if now + 1.5 < age + elapsed => touched.push(format!(
                "installed again ({age} s old, then {now} s, {elapsed} s later): {flow}"
            )),
            Some(_) => {}
        }
    }
    touched
}

/// The replica (by number) that the switch has as its sole master, given its controllers'
/// roles ([`Sandbox::controller_roles`]) and the targets of the replicas that run: exactly
/// one of them master and every other one slave, or None.
pub fn sole_master(
    roles: &std::collections::BTreeMap<String, String>,
    running: &[(usize, String)],
) -> Option<usize> {
    let role = |target: &String| roles.get(target).map(String::as_str);
    let masters: Vec<usize> = running
        .iter()
        .filter(|(_, t)| role(t) == Some("master"))
        .map(|(i, _)| *i)
        .collect();
    let slaves = running
        .iter()
        .filter(|(_, t)| role(t) == Some("slave"))
        .count();
    (masters.len() == 1 && slaves + 1 == running.len()).then(|| masters[0])
}

fn rest_to(
    sb: &Sandbox,
    base: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<String, SandboxError> {
    let url = format!("{base}/{path}");
    let mut argv = vec!["curl", "-sS", "-f", "-X", method, &url];
    if !body.is_empty() {
        argv.extend(["-H", "Content-Type: application/json", "-d", body]);
    }
    sb.node(&argv)
}

/// The REST fixture the daemon tests share: node `n1` at [`fixture::NODE_IP`] with pod CIDR
/// 10.244.0.0/24, pods as hosts on `br-int`, and service `web`'s endpoints.
pub mod fixture {
    use crate::{Host, HostSpec, Sandbox};

    /// Node n1's address.
    pub const NODE_IP: &str = "192.168.50.10";

    /// [`super::rest`], failing the test on an error.
    pub fn curl(sb: &Sandbox, method: &str, path: &str, body: &str) -> String {
        super::rest(sb, method, path, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The REST body of pod `uid` on node n1 (its one interface also has the uid).
    pub fn pod_body(uid: &str, ip: &str, mac: &str) -> String {
        format!(
            r#"{{"pods":[{{"uid":"{uid}","name":"{uid}","network-NS":"default",
        "host-ip-address":"{NODE_IP}","port-mac-address":"{mac}",
        "interface":[{{"uid":"{uid}","ip-address":"{ip}","network-type":"FLAT"}}]}}]}}"#
        )
    }

    /// Adds a pod host on `ofport` of `br-int`, bound to the pod `uid` by
    /// `external_ids:iface-id`.
    pub fn add_pod(sb: &mut Sandbox, uid: &str, ip: &str, mac: &str, ofport: u16) -> Host {
        let spec = HostSpec::new(uid, &format!("{ip}/24"), mac, ofport).with_gateway("10.244.0.1");
        let host = sb
            .add_host("br-int", spec)
            .unwrap_or_else(|e| panic!("pod {uid}: {e}"));
        sb.vsctl(&[
            "set",
            "interface",
            uid,
            &format!("external_ids:iface-id={uid}"),
        ])
        .unwrap_or_else(|e| panic!("pod {uid}: {e}"));
        host
    }

    /// The endpoints body of service `web`: `ips` on port 8080, on node n1, on one line (it
    /// also goes into curl config files).
    pub fn web_endpoints_body(ips: &[&str]) -> String {
        let addresses: Vec<String> = ips
            .iter()
            .map(|ip| format!(r#"{{"service:ip-address":"{ip}","service:node-name":"n1"}}"#))
            .collect();
        format!(
            r#"{{"service:endpoints":[{{"service:uid":"ep-web","service:name":"web","service:network-NS":"default","service:endpoint-addresses":[{}],"service:endpoint-ports":[{{"service:name":"http","service:port":8080}}]}}]}}"#,
            addresses.join(",")
        )
    }

    /// The REST body of a one-port ClusterIP service `uid` (named `uid`) on `ip`, port 80 to
    /// 8080.
    pub fn service_body(uid: &str, ip: &str) -> String {
        format!(
            r#"{{"service:services":[{{"service:uid":"{uid}","service:name":"{uid}",
        "service:network-NS":"default","service:cluster-ip-address":"{ip}",
        "service:service-ports":[{{"service:name":"http","service:port":80,
        "service:target-port":"8080"}}]}}]}}"#
        )
    }

    /// The pods of [`put_web`]: backends `pa` and `pb` (10.244.0.11 and .12, serving TCP 8080)
    /// and client `pc` (10.244.0.13), as hosts on `br-int` ports 11 to 13. Returns the client
    /// and the backends' servers.
    pub fn web_pods(sb: &mut Sandbox) -> (Host, Vec<crate::Process>) {
        let pa = add_pod(sb, "pa", "10.244.0.11", "0a:58:0a:f4:00:0b", 11);
        let pb = add_pod(sb, "pb", "10.244.0.12", "0a:58:0a:f4:00:0c", 12);
        let pc = add_pod(sb, "pc", "10.244.0.13", "0a:58:0a:f4:00:0d", 13);
        let servers = vec![
            pa.serve("pa", &["tcp:8080"])
                .unwrap_or_else(|e| panic!("pa: {e}")),
            pb.serve("pb", &["tcp:8080"])
                .unwrap_or_else(|e| panic!("pb: {e}")),
        ];
        (pc, servers)
    }

    /// Puts, through `put(path, body)`, node n1 and the pods of [`web_pods`].
    pub fn put_node_and_pods(put: &dyn Fn(&str, &str)) {
        put(
            "k8s-node:k8s-nodes-info/k8s-nodes/node-1",
            &format!(
                r#"{{"k8s-node:k8s-nodes":[{{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
                "k8s-node:internal-ip-address":"{NODE_IP}","k8s-node:pod-cidr":"10.244.0.0/24"}}]}}"#
            ),
        );
        for (uid, ip, mac) in [
            ("pa", "10.244.0.11", "0a:58:0a:f4:00:0b"),
            ("pb", "10.244.0.12", "0a:58:0a:f4:00:0c"),
            ("pc", "10.244.0.13", "0a:58:0a:f4:00:0d"),
        ] {
            put(&format!("pod:coe/pods/{uid}"), &pod_body(uid, ip, mac));
        }
    }

    /// Puts, through `put(path, body)`, node n1, the pods of [`web_pods`], service `web`
    /// (`svc-web`, 10.96.0.10:80 to 8080) and its endpoints on `pa` and `pb`.
    pub fn put_web(put: &dyn Fn(&str, &str)) {
        put_node_and_pods(put);
        let web = service_body("svc-web", "10.96.0.10")
            .replace(r#""service:name":"svc-web""#, r#""service:name":"web""#);
        put("service:service-information/services/svc-web", &web);
        put(
            "service:endpoints-info/endpoints/ep-web",
            &web_endpoints_body(&["10.244.0.11", "10.244.0.12"]),
        );
    }

    /// Puts the endpoints of service `web`.
    pub fn put_web_endpoints(sb: &Sandbox, ips: &[&str]) {
        curl(
            sb,
            "PUT",
            "service:endpoints-info/endpoints/ep-web",
            &web_endpoints_body(ips),
        );
    }
}

/// Seconds since midnight (UTC) of a daemon log line, `2026-11-22T05:48:47.288547Z  INFO …`.
pub fn log_time_of_day(line: &str) -> Option<f64> {
    let (_, time) = line.split_once('T')?;
    let time = time.split('Z').next()?;
    let mut parts = time.split(':').map(|p| p.parse::<f64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Seconds since midnight (UTC) now, to compare with [`log_time_of_day`].
pub fn time_of_day() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs_f64() % 86_400.0
}

/// A daemon's log read as it grows, for benches that time what the daemon logs: each
/// [`LogLines::poll`] returns the complete lines appended since the last one, and
/// [`LogLines::wait_until`] sleeps until the daemon writes to it. Waiting on inotify rather than
/// reading the file every half millisecond keeps the bench off the cores it measures: a
/// reader woken every 500 µs landed on the core that the engine and `ovs-vswitchd` shared,
/// and each wake-up switched one out for the other (`docs/performance.md`).
#[derive(Debug)]
pub struct LogLines {
    path: PathBuf,
    file: std::fs::File,
    pending: Vec<u8>,
    /// An inotify watch for writes to the log (non-blocking).
    writes: std::os::fd::OwnedFd,
}

impl LogLines {
    /// Follows the log at `path` from its start.
    pub fn open(path: PathBuf) -> Result<Self, SandboxError> {
        use rustix::fs::inotify;
        let file = std::fs::File::open(&path)?;
        let writes = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .map_err(std::io::Error::from)?;
        inotify::add_watch(&writes, &path, inotify::WatchFlags::MODIFY)
            .map_err(std::io::Error::from)?;
        Ok(Self {
            path,
            file,
            pending: Vec::new(),
            writes,
        })
    }

    /// Sleeps until the log is written to (since the last call) or `deadline` passes.
    pub fn wait_until(&self, deadline: std::time::Instant) -> Result<(), SandboxError> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let timeout = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&self.writes, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        // Empty the queue of events: what was written is read by the next poll.
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&self.writes, &mut buf) {
                Ok(n) if n > 0 => {}
                Ok(_) | Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }

    /// The complete lines appended since the last call.
    pub fn poll(&mut self) -> Result<Vec<String>, SandboxError> {
        use std::io::Read;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let n = self.file.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            self.pending.extend_from_slice(&chunk[..n]);
        }
        let Some(last_newline) = self.pending.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        let complete: Vec<u8> = self.pending.drain(..=last_newline).collect();
        Ok(String::from_utf8_lossy(&complete)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The last `n` lines of the log (of its last 64 KiB), for error messages.
    pub fn tail(&self, n: usize) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

//! A real Raft-clustered `ovsdb-server` on loopback TCP, for tests of a replicated store.
//!
//! [`RaftCluster::start`] makes an n-member cluster of one schema's database in a temp dir
//! under `/tmp` (`svcf-raft-PID-SEQ/`, holding `mI.db`, `mI.log`, `mI.ctl`, `mI.pid` for member
//! I), starts every member as a child `ovsdb-server` (no `--detach`), waits until all of them
//! have joined and agree on a leader, and shortens the election timer to
//! [`ELECTION_TIMER_MS`] so failover tests are quick. Members can be killed (SIGKILL) and
//! restarted on the same ports and files. Dropping the cluster kills every member it started,
//! by pid, and removes the directory (kept after a panic, or with `SVCFLOW_KEEP_SANDBOX` set).
//! Clusters left behind by a test process that was killed are reaped by the next
//! [`RaftCluster::start`].
//!
//! Ports are picked below the kernel's ephemeral range (`ip_local_port_range`), so that
//! outgoing connections (clients, Raft peers reconnecting) can never take the port of a
//! member while it is down. A cluster reserves its ports in this process until it is dropped,
//! so clusters of tests running side by side never pick each other's ports (a port is free
//! between the moment it is picked and the moment its member binds it, and while a member is
//! down). Should another process take one in that moment anyway, the member's log says
//! `Address already in use` (OVS retries the bind every second rather than exiting): the
//! start sees it, drops that try and starts again on other ports, up to [`START_TRIES`] times.
//!
//! What OVS 3.1 does, as measured with this harness (see also `tests/raft_harness.rs`):
//! - a follower accepts `transact` and forwards it to the leader; during a failover it holds
//!   the write and answers once a new leader has committed it;
//! - leader failover takes about 0.5-1.3 s with the 500 ms timer (1.7-2.5 s with OVS's
//!   default 1000 ms);
//! - a member without quorum answers reads from its possibly stale copy, but holds a write
//!   (no reply, no error) until the cluster has a leader again. A write held by a candidate
//!   is dropped if its client disconnects first; one a deposed leader already appended to its
//!   log can still be committed after the client gave up, so a timed-out write has an unknown
//!   outcome;
//! - a leader whose followers all die still says `Role: leader` in `cluster/status`
//!   for 2-3 s, then becomes a candidate;
//! - a member's `_Server` `Database` row says `connected: false` only once it has failed an
//!   election and is retrying (1.5-3.8 s after losing the others here); until then it says
//!   `connected: true, leader: false`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::{SandboxError, cmd, netns};

/// The election timer [`RaftCluster::start`] sets, in milliseconds (OVS's default is 1000;
/// OVS allows 100..=600000, and raising it at most doubles it per step).
pub const ELECTION_TIMER_MS: u64 = 500;

/// How long a member may take to come up, and the whole cluster to form.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `ovs-appctl` call may take.
const APPCTL_TIMEOUT: &str = "--timeout=3";
/// The prefix of every cluster's directory name: `svcf-raft-OWNERPID-SEQ`.
const DIR_PREFIX: &str = "svcf-raft-";
/// The package that provides the tools.
const PACKAGE: &str = "openvswitch-switch";

/// How many times [`RaftCluster::start`] tries fresh ports when a member cannot bind one.
pub const START_TRIES: usize = 3;
/// What a member's log says when another process holds one of its ports.
const PORT_TAKEN: &str = "Address already in use";

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);
/// Ports that live clusters of this process hold, even while their member is down.
static RESERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

#[derive(Debug)]
struct Member {
    raft_port: u16,
    client_port: u16,
    child: Option<Child>,
}

/// An n-member Raft cluster of `ovsdb-server`s on 127.0.0.1; see the module docs.
#[derive(Debug)]
pub struct RaftCluster {
    dir: PathBuf,
    db: String,
    members: Vec<Member>,
}

/// What `cluster/status` says about one member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Status {
    /// The short server id, e.g. `03af`.
    sid: String,
    /// `cluster member`, `joining cluster`, `disconnected from the cluster (...)`, ...
    status: String,
    /// `leader`, `follower`, `candidate`.
    role: String,
    /// `self`, a short server id, or `unknown`.
    leader: String,
    term: u64,
    election_timer: Option<u64>,
}

impl RaftCluster {
    /// Creates and starts an `n`-member cluster of `schema`'s database on 127.0.0.1, and
    /// returns once every member has joined and follows one leader.
    pub fn start(schema: &Path, n: usize) -> Result<RaftCluster, SandboxError> {
        Self::start_first_on(schema, n, None)
    }

    /// [`RaftCluster::start`], whose first try uses `ports` (raft and client port of member 0,
    /// then of member 1, ...) rather than fresh ones, so a test can hand it a port another
    /// process holds. Later tries pick fresh ports.
    #[doc(hidden)]
    pub fn start_first_on(
        schema: &Path,
        n: usize,
        mut ports: Option<Vec<u16>>,
    ) -> Result<RaftCluster, SandboxError> {
        if ports.as_ref().is_some_and(|p| p.len() != 2 * n) {
            return Err(SandboxError::Invalid(format!(
                "a {n}-member cluster takes {} ports",
                2 * n
            )));
        }
        for program in ["ovsdb-tool", "ovsdb-server", "ovs-appctl", "ovsdb-client"] {
            cmd::require_program(program, PACKAGE)?;
        }
        if n == 0 {
            return Err(SandboxError::Invalid(
                "a Raft cluster needs at least one member".into(),
            ));
        }
        if !schema.is_file() {
            return Err(SandboxError::Invalid(format!(
                "the schema {} does not exist",
                schema.display()
            )));
        }
        let schema = schema.to_string_lossy().into_owned();
        let root = temp_root();
        reap_dead_clusters(&root);
        let mut tries = Vec::new();
        loop {
            match Self::try_start(&root, &schema, n, ports.take()) {
                Ok(cluster) => return Ok(cluster),
                Err(StartError::Failed(e)) => return Err(e),
                Err(StartError::PortTaken(taken)) => {
                    eprintln!("Raft cluster: {taken}; starting again on other ports");
                    tries.push(taken);
                    if tries.len() >= START_TRIES {
                        return Err(SandboxError::Invalid(format!(
                            "cannot start a {n}-member Raft cluster: in {START_TRIES} tries, \
                             another process held a port each time: {}",
                            tries.join("; ")
                        )));
                    }
                }
            }
        }
    }

    /// One try of [`RaftCluster::start`] on fresh ports (or on `ports`); when a member could
    /// not bind one of its ports, the try is torn down and its error says so.
    fn try_start(
        root: &Path,
        schema: &str,
        n: usize,
        ports: Option<Vec<u16>>,
    ) -> Result<RaftCluster, StartError> {
        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{DIR_PREFIX}{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let db = cmd::run(&["ovsdb-tool", "schema-name", schema])?
            .trim()
            .to_string();
        let ports = match ports {
            Some(ports) => {
                reserved().extend(ports.iter().copied());
                ports
            }
            None => free_ports(2 * n)?,
        };
        let members = ports
            .chunks(2)
            .map(|pair| Member {
                raft_port: pair[0],
                client_port: pair[1],
                child: None,
            })
            .collect();
        // From here on, Drop cleans up whatever was made.
        let mut cluster = RaftCluster { dir, db, members };
        let leader_raft = cluster.raft_remote(0);
        cmd::run(&[
            "ovsdb-tool",
            "create-cluster",
            &cluster.file(0, "db"),
            schema,
            &leader_raft,
        ])?;
        for i in 1..n {
            cmd::run(&[
                "ovsdb-tool",
                "join-cluster",
                &cluster.file(i, "db"),
                &cluster.db,
                &cluster.raft_remote(i),
                &leader_raft,
            ])?;
        }
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_formed(n, START_TIMEOUT)?;
        cluster.set_election_timer(ELECTION_TIMER_MS)?;
        Ok(cluster)
    }

    /// [`RaftCluster::wait_connected`] for a cluster being started, which gives up as soon as
    /// a member's log says another process holds one of its ports. A timeout's error carries
    /// every member's log tail as well as its `cluster/status`.
    fn wait_formed(&self, need: usize, timeout: Duration) -> Result<usize, StartError> {
        match self.poll_leader(need, timeout, Self::port_taken) {
            Polled::Leader(leader) => Ok(leader),
            Polled::GaveUp(line) => Err(StartError::PortTaken(line)),
            Polled::TimedOut => {
                let logs: String = (0..self.members.len())
                    .map(|i| format!("--- member {i} log tail:\n{}\n", self.log_tail(i, 15)))
                    .collect();
                Err(StartError::Failed(SandboxError::Timeout {
                    what: format!("{}\n{logs}", self.not_connected(need)),
                    after: timeout,
                }))
            }
        }
    }

    /// The first line of a member's log saying one of its ports is held by another process.
    fn port_taken(&self) -> Option<String> {
        (0..self.members.len()).find_map(|i| {
            let text = std::fs::read_to_string(self.file(i, "log")).ok()?;
            let line = text.lines().find(|l| l.contains(PORT_TAKEN))?;
            Some(format!("member {i}: {}", line.trim()))
        })
    }

    /// Client remotes of every member, `tcp:127.0.0.1:PORT`, in member order.
    pub fn remotes(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.remote(i)).collect()
    }

    /// The same joined with commas (what a `--store ovsdb:` flag takes).
    pub fn remote_list(&self) -> String {
        self.remotes().join(",")
    }

    /// Member `i`'s Unix socket (it listens there too): reachable from any network namespace.
    pub fn socket(&self, i: usize) -> PathBuf {
        self.dir().join(format!("m{i}.sock"))
    }

    /// Every member's `unix:` remote, joined with commas, for a client in another network
    /// namespace (a daemon in a sandbox's node namespace).
    pub fn unix_remote_list(&self) -> String {
        (0..self.members.len())
            .map(|i| format!("unix:{}", self.socket(i).display()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client remote, `tcp:127.0.0.1:PORT`.
    ///
    /// # Panics
    /// If there is no member `i`.
    pub fn remote(&self, i: usize) -> String {
        format!("tcp:127.0.0.1:{}", self.members[i].client_port)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never, once started).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The database name (read from the schema with `ovsdb-tool schema-name`).
    pub fn db(&self) -> &str {
        &self.db
    }

    /// The cluster's directory: `mI.db`, `mI.log`, `mI.ctl`, `mI.pid` for member I.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether member `i` is running.
    pub fn is_running(&self, i: usize) -> bool {
        self.members
            .get(i)
            .and_then(|m| m.child.as_ref())
            .is_some_and(|c| netns::process_alive(c.id()))
    }

    /// The process id member `i` was started with, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        if self.is_running(i) {
            self.members[i].child.as_ref().map(Child::id)
        } else {
            None
        }
    }

    /// Which member is leader now, per `ovs-appctl -t <member ctl> cluster/status <db>`
    /// ("Role: leader"), if any running member says so. Should two say so (a deposed leader
    /// that has not heard of the new term yet), the one with the higher term.
    pub fn leader(&self) -> Option<usize> {
        let statuses = self.statuses();
        leader_of(&statuses)
    }

    /// Waits until some running member is leader and a majority of all members is running
    /// and follows it (same term, "Status: cluster member"); returns the leader's index.
    /// On timeout the error carries every member's `cluster/status`.
    pub fn wait_leader(&self, timeout: Duration) -> Result<usize, SandboxError> {
        let majority = self.members.len() / 2 + 1;
        self.wait_connected(majority, timeout)
    }

    /// Waits until at least `need` members are running and follow one leader (counting the
    /// leader itself); returns the leader's index.
    pub fn wait_connected(&self, need: usize, timeout: Duration) -> Result<usize, SandboxError> {
        match self.poll_leader(need, timeout, |_| None) {
            Polled::Leader(leader) => Ok(leader),
            Polled::GaveUp(_) | Polled::TimedOut => Err(SandboxError::Timeout {
                what: self.not_connected(need),
                after: timeout,
            }),
        }
    }

    /// Polls until at least `need` members follow one leader, `give_up` says why to stop
    /// (checked first, every round), or `timeout` passes.
    fn poll_leader(
        &self,
        need: usize,
        timeout: Duration,
        give_up: impl Fn(&Self) -> Option<String>,
    ) -> Polled {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(why) = give_up(self) {
                return Polled::GaveUp(why);
            }
            let statuses = self.statuses();
            if let Some(leader) = leader_of(&statuses) {
                if connected_to(&statuses, leader) >= need {
                    return Polled::Leader(leader);
                }
            }
            if Instant::now() >= deadline {
                return Polled::TimedOut;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// What a wait for `need` members to follow a leader awaited, with every member's
    /// `cluster/status`.
    fn not_connected(&self, need: usize) -> String {
        format!(
            "a leader of {} followed by {need} of {} members; their cluster/status:\n{}",
            self.db,
            self.members.len(),
            self.describe()
        )
    }

    /// `ovs-appctl cluster/status DB` of member `i`.
    pub fn cluster_status(&self, i: usize) -> Result<String, SandboxError> {
        self.check_index(i)?;
        self.appctl(i, &["cluster/status", &self.db])
    }

    /// Changes the cluster's election timer (through the leader, at most doubling it per
    /// step as OVS requires) and waits until the leader reports the new value.
    pub fn set_election_timer(&self, ms: u64) -> Result<(), SandboxError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let leader = self.wait_leader(deadline.saturating_duration_since(Instant::now()))?;
            let current = self
                .status(leader)
                .and_then(|s| s.election_timer)
                .unwrap_or(1000);
            if current == ms {
                return Ok(());
            }
            let step = if ms > current {
                ms.min(current.saturating_mul(2))
            } else {
                ms
            };
            // This fails while an earlier change is still being committed; retry.
            let _ = self.appctl(
                leader,
                &["cluster/change-election-timer", &self.db, &step.to_string()],
            );
            if Instant::now() >= deadline {
                return Err(SandboxError::Timeout {
                    what: format!(
                        "the election timer of {} to become {ms} ms; cluster/status:\n{}",
                        self.db,
                        self.describe()
                    ),
                    after: START_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGKILLs member `i` (by the pid it was started with) and reaps it; its files stay.
    pub fn kill(&mut self, i: usize) -> Result<(), SandboxError> {
        self.check_index(i)?;
        let Some(mut child) = self.members[i].child.take() else {
            return Err(SandboxError::Invalid(format!("member {i} is not running")));
        };
        let _ = child.kill();
        child.wait()?;
        Ok(())
    }

    /// Restarts a killed or stopped member `i` on the same ports and files, and waits until it
    /// answers on its control socket (not until it has rejoined: see
    /// [`RaftCluster::wait_connected`]).
    pub fn restart(&mut self, i: usize) -> Result<(), SandboxError> {
        self.check_index(i)?;
        if let Some(child) = self.members[i].child.as_mut() {
            if child.try_wait()?.is_none() {
                return Err(SandboxError::Invalid(format!(
                    "member {i} is still running"
                )));
            }
            self.members[i].child = None;
        }
        self.spawn(i)
    }

    /// Runs `ovsdb-client transact <member i> TRANSACTION` (a JSON array: the database name,
    /// then operations) and returns its stdout; kills it after `timeout`
    /// ([`SandboxError::Timeout`]).
    pub fn transact(
        &self,
        i: usize,
        transaction: &str,
        timeout: Duration,
    ) -> Result<String, SandboxError> {
        self.client("transact", i, transaction, timeout)
    }

    /// Like [`RaftCluster::transact`] with `ovsdb-client query` (the transaction is aborted).
    pub fn query(
        &self,
        i: usize,
        transaction: &str,
        timeout: Duration,
    ) -> Result<String, SandboxError> {
        self.client("query", i, transaction, timeout)
    }

    /// The last `lines` lines of member `i`'s log.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.file(i, "log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn client(
        &self,
        command: &str,
        i: usize,
        transaction: &str,
        timeout: Duration,
    ) -> Result<String, SandboxError> {
        self.check_index(i)?;
        let remote = self.remote(i);
        let argv = ["ovsdb-client", command, remote.as_str(), transaction];
        let child = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: argv[0].to_string(),
                source,
            })?;
        let output = cmd::wait_output(child, timeout, &argv.join(" "))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            // `ovsdb-client` exits 0 even when an operation failed; the reply says so.
            if let Some(error) = transaction_error(&stdout) {
                return Err(SandboxError::Command {
                    command: argv.join(" "),
                    status: format!("the transaction failed: {error}"),
                    stderr: stdout.trim().to_string(),
                });
            }
            Ok(stdout)
        } else {
            Err(SandboxError::Command {
                command: argv.join(" "),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            })
        }
    }

    fn check_index(&self, i: usize) -> Result<(), SandboxError> {
        if i < self.members.len() {
            Ok(())
        } else {
            Err(SandboxError::Invalid(format!(
                "no member {i} in a cluster of {}",
                self.members.len()
            )))
        }
    }

    /// `DIR/mI.EXT`.
    fn file(&self, i: usize, ext: &str) -> String {
        self.dir
            .join(format!("m{i}.{ext}"))
            .to_string_lossy()
            .into_owned()
    }

    /// Member `i`'s Raft address, `tcp:127.0.0.1:PORT`.
    ///
    /// # Panics
    /// If there is no member `i`.
    pub fn raft_remote(&self, i: usize) -> String {
        format!("tcp:127.0.0.1:{}", self.members[i].raft_port)
    }

    fn appctl(&self, i: usize, args: &[&str]) -> Result<String, SandboxError> {
        let ctl = self.file(i, "ctl");
        let mut argv = vec!["ovs-appctl", APPCTL_TIMEOUT, "-t", ctl.as_str()];
        argv.extend_from_slice(args);
        cmd::run(&argv)
    }

    fn status(&self, i: usize) -> Option<Status> {
        if !self.is_running(i) {
            return None;
        }
        self.cluster_status(i).ok().map(|text| parse_status(&text))
    }

    fn statuses(&self) -> Vec<Option<Status>> {
        (0..self.members.len()).map(|i| self.status(i)).collect()
    }

    /// Every member's state and `cluster/status`, for error messages.
    fn describe(&self) -> String {
        let mut out = String::new();
        for i in 0..self.members.len() {
            let state = if self.is_running(i) {
                match self.cluster_status(i) {
                    Ok(text) => text,
                    Err(e) => format!("(cluster/status failed: {e})"),
                }
            } else {
                "(not running)".to_string()
            };
            out.push_str(&format!(
                "--- member {i} ({}, raft {}):\n{}\n",
                self.remote(i),
                self.raft_remote(i),
                state.trim_end()
            ));
        }
        out
    }

    /// Starts member `i` as a child and waits until its control socket answers.
    fn spawn(&mut self, i: usize) -> Result<(), SandboxError> {
        let ctl = self.file(i, "ctl");
        // A member killed earlier leaves its socket file behind.
        let _ = std::fs::remove_file(&ctl);
        let args = [
            self.file(i, "db"),
            format!("--remote=ptcp:{}:127.0.0.1", self.members[i].client_port),
            format!("--remote=punix:{}", self.socket(i).display()),
            format!("--unixctl={ctl}"),
            format!("--log-file={}", self.file(i, "log")),
            format!("--pidfile={}", self.file(i, "pid")),
            "--no-chdir".to_string(),
            "-vconsole:off".to_string(),
        ];
        let child = Command::new("ovsdb-server")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: "ovsdb-server".to_string(),
                source,
            })?;
        self.members[i].child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.appctl(i, &["version"]).is_ok() {
                return Ok(());
            }
            let exited = self.members[i]
                .child
                .as_mut()
                .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                self.members[i].child = None;
                return Err(SandboxError::DaemonExited {
                    daemon: format!("ovsdb-server (Raft member {i})"),
                    log_tail: self.log_tail(i, 20),
                });
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Timeout {
                    what: format!(
                        "ovsdb-server (Raft member {i}) to start (log: {})",
                        self.file(i, "log")
                    ),
                    after: START_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RaftCluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "Raft cluster {} torn down after a panic:\n{}",
                self.dir.display(),
                self.describe()
            );
            for i in 0..self.members.len() {
                eprintln!("--- member {i} log tail:\n{}", self.log_tail(i, 15));
            }
        }
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        release(
            self.members
                .iter()
                .flat_map(|m| [m.raft_port, m.client_port]),
        );
        if panicking || std::env::var_os("SVCFLOW_KEEP_SANDBOX").is_some() {
            eprintln!("Raft cluster: files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Where cluster directories go: the temp dir if its path is short enough for the unixctl
/// sockets (unix socket paths are limited to 107 bytes), else `/tmp`.
fn temp_root() -> PathBuf {
    let root = std::env::temp_dir();
    if root.as_os_str().len() <= 60 {
        root
    } else {
        PathBuf::from("/tmp")
    }
}

/// The running leader, the one with the highest term should several claim it.
fn leader_of(statuses: &[Option<Status>]) -> Option<usize> {
    statuses
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
        .filter(|(_, s)| s.role == "leader")
        .max_by_key(|(_, s)| s.term)
        .map(|(i, _)| i)
}

/// How many members (the leader included) are cluster members following `leader` in its term.
fn connected_to(statuses: &[Option<Status>], leader: usize) -> usize {
    let Some(Some(lead)) = statuses.get(leader) else {
        return 0;
    };
    statuses
        .iter()
        .enumerate()
        .filter(|(i, s)| match s {
            Some(_) if *i == leader => true,
            Some(s) => {
                s.status == "cluster member"
                    && s.role == "follower"
                    && s.term == lead.term
                    && s.leader == lead.sid
            }
            None => false,
        })
        .count()
}

/// The first error in an OVSDB `transact` reply (a JSON array of per-operation results), if
/// any.
fn transaction_error(reply: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(reply.trim()).ok()?;
    value.as_array()?.iter().find_map(|result| {
        let error = result.get("error")?;
        if error.is_null() {
            return None;
        }
        let details = result.get("details").and_then(|d| d.as_str()).unwrap_or("");
        Some(
            format!("{} {details}", error.as_str().unwrap_or("?"))
                .trim()
                .to_string(),
        )
    })
}

fn parse_status(text: &str) -> Status {
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Server ID" => {
                status.sid = value.split_whitespace().next().unwrap_or("").to_string();
            }
            "Status" => status.status = value.to_string(),
            "Role" => status.role = value.to_string(),
            "Leader" => status.leader = value.to_string(),
            "Term" => status.term = value.parse().unwrap_or(0),
            "Election timer" => status.election_timer = value.parse().ok(),
            _ => {}
        }
    }
    status
}

/// How [`RaftCluster::poll_leader`] ended.
enum Polled {
    Leader(usize),
    /// The give-up check's reason.
    GaveUp(String),
    TimedOut,
}

/// Why one try of [`RaftCluster::start`] failed.
enum StartError {
    /// A member's port is held by another process: the log line that says so.
    PortTaken(String),
    Failed(SandboxError),
}

impl From<SandboxError> for StartError {
    fn from(e: SandboxError) -> Self {
        StartError::Failed(e)
    }
}

impl From<std::io::Error> for StartError {
    fn from(e: std::io::Error) -> Self {
        StartError::Failed(e.into())
    }
}

/// The reserved ports, even if a thread panicked while holding the lock.
fn reserved() -> std::sync::MutexGuard<'static, BTreeSet<u16>> {
    RESERVED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Gives ports back that [`free_ports`] reserved.
fn release(ports: impl IntoIterator<Item = u16>) {
    let mut reserved = reserved();
    for port in ports {
        reserved.remove(&port);
    }
}

/// `count` distinct loopback ports that are free now and not reserved by another cluster of
/// this process, below the ephemeral port range so that no outgoing connection can take one
/// while its member is down; they stay reserved until [`release`]d. Falls back to ports the
/// kernel picks (bind to port 0) if the ephemeral range leaves no room below it.
fn free_ports(count: usize) -> Result<Vec<u16>, SandboxError> {
    let mut reserved = reserved();
    let ports = pick_ports(count, &reserved)?;
    reserved.extend(ports.iter().copied());
    Ok(ports)
}

fn pick_ports(count: usize, reserved: &BTreeSet<u16>) -> Result<Vec<u16>, SandboxError> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u16>().ok())
        })
        .unwrap_or(32768);
    const FLOOR: u16 = 10_000;
    // Listeners are held until every port is chosen, so no port is chosen twice.
    let mut held = Vec::with_capacity(count);
    let mut ports = Vec::with_capacity(count);
    if low > FLOOR + 1000 {
        let span = u64::from(low - FLOOR);
        let mut seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32)
            ^ u64::from(NEXT_SEQ.load(Ordering::Relaxed)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut tries = 0;
        while ports.len() < count && tries < 1000 {
            tries += 1;
            // xorshift64*
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let offset =
                u16::try_from(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % span).unwrap_or(0);
            let port = FLOOR + offset;
            if ports.contains(&port) || reserved.contains(&port) {
                continue;
            }
            if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                held.push(listener);
                ports.push(port);
            }
        }
    }
    // Ports the kernel picks (never one handed out before in this process).
    while ports.len() < count {
        let port = cmd::try_free_port()?;
        if !reserved.contains(&port) {
            ports.push(port);
        }
    }
    Ok(ports)
}

/// Kills the members of clusters whose owning process is gone (only processes whose command
/// line names that cluster's directory) and removes their directories.
fn reap_dead_clusters(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if netns::process_alive(owner) {
            continue;
        }
        let dir = entry.path();
        let dir_text = dir.to_string_lossy().into_owned();
        if let Ok(files) = std::fs::read_dir(&dir) {
            for file in files.flatten() {
                if file.path().extension().is_none_or(|e| e != "pid") {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(file.path()) else {
                    continue;
                };
                let pid = text.trim();
                let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&dir_text))
                    .unwrap_or(false);
                if ours && pid.parse::<u32>().is_ok() {
                    let _ = cmd::run(&["kill", "-9", pid]);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: &str = "03af\nName: Svcflow\nCluster ID: 8594 (8594c3c4-cfc8-4627-b4bc-e7bbe2018eb0)\n\
        Server ID: 03af (03af5fbc-d18e-4b13-8157-23f73ac41e8f)\nAddress: tcp:127.0.0.1:16640\n\
        Status: cluster member\nRole: leader\nTerm: 4\nLeader: self\nVote: self\n\n\
        Election timer: 1000\nLog: [2, 5]\n";

    fn follower(sid: &str, leader: &str, term: u64) -> String {
        format!(
            "{sid}\nServer ID: {sid} (x)\nStatus: cluster member\nRole: follower\nTerm: {term}\n\
             Leader: {leader}\nElection timer: 1000\n"
        )
    }

    #[test]
    fn status_is_parsed() {
        let s = parse_status(LEADER);
        assert_eq!(s.sid, "03af");
        assert_eq!(s.status, "cluster member");
        assert_eq!(s.role, "leader");
        assert_eq!(s.leader, "self");
        assert_eq!(s.term, 4);
        assert_eq!(s.election_timer, Some(1000));
    }

    #[test]
    fn a_majority_must_follow_the_leader_in_its_term() {
        let statuses = vec![
            Some(parse_status(LEADER)),
            Some(parse_status(&follower("0edd", "03af", 4))),
            Some(parse_status(&follower("42c4", "03af", 3))),
        ];
        assert_eq!(leader_of(&statuses), Some(0));
        assert_eq!(connected_to(&statuses, 0), 2);
        let alone = vec![Some(parse_status(LEADER)), None, None];
        assert_eq!(connected_to(&alone, 0), 1);
        assert_eq!(leader_of(&[None, None]), None);
    }

    #[test]
    fn errors_in_a_transaction_reply_are_found() {
        let failed = r#"[{"details":"No column x in table Revision.","error":"unknown column"}]"#;
        assert_eq!(
            transaction_error(failed).as_deref(),
            Some("unknown column No column x in table Revision.")
        );
        assert_eq!(
            transaction_error(r#"[{"uuid":["uuid","4"]},{"count":1}]"#),
            None
        );
        assert_eq!(transaction_error(r#"[{"count":0},{"error":null}]"#), None);
        let second = r#"[{"count":1},{"error":"constraint violation","details":"d"}]"#;
        assert_eq!(
            transaction_error(second).as_deref(),
            Some("constraint violation d")
        );
    }

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = free_ports(6).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6);
        let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ports.iter().all(|p| *p < low), "{ports:?} vs {low}");
        assert!(ports.iter().all(|p| reserved().contains(p)), "{ports:?}");
        release(ports.iter().copied());
        assert!(ports.iter().all(|p| !reserved().contains(p)), "{ports:?}");
    }

    #[test]
    fn a_reserved_port_is_never_picked() {
        // Every other port of the range is reserved: a pick that ignored the reservations
        // would land on one about half the time.
        let reserved: BTreeSet<u16> = (10_000..32_768).step_by(2).collect();
        for _ in 0..20 {
            let ports = pick_ports(6, &reserved).unwrap();
            assert_eq!(ports.len(), 6);
            assert!(ports.iter().all(|p| !reserved.contains(p)), "{ports:?}");
        }
    }
}

//! What the benches that drive the real daemon share: their sizes from the environment, the
//! optimized daemon binary, percentiles, reading a process's peak memory and CPU time, and
//! the `ovs-ofctl --bundle` anchor ([`AnchorFiles`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Sandbox;
use crate::svcflow::svcflow_binary;

/// What the daemon installed on a bridge, dumped for the anchor: `ovs-ofctl --no-names` text,
/// one flow and one group a line, in files of the sandbox's directory.
pub struct AnchorFiles {
    flows: PathBuf,
    groups: PathBuf,
    /// How many flows and groups were dumped.
    pub counts: (u64, u64),
}

/// The anchor's run: `ovs-ofctl --bundle add-groups` and `--bundle add-flows` of the dumped
/// state onto an empty bridge.
pub struct Anchor {
    /// From the first `ovs-ofctl` start to the second's end.
    pub time: Duration,
    /// CPU time meanwhile: `ovs-ofctl`'s (both runs), `ovs-vswitchd`'s.
    pub cpu: (Duration, Duration),
}

/// `bridge`'s flows (`ovs-ofctl dump-flows --no-stats --no-names`) and group lines
/// (`dump-groups --no-names`), and how many of each.
fn dumped(sb: &Sandbox, bridge: &str) -> (String, Vec<String>, (u64, u64)) {
    let flows = sb
        .ofctl("dump-flows", bridge, &["--no-stats", "--no-names"])
        .unwrap_or_else(|e| panic!("dumping {bridge}'s flows: {e}"));
    let groups = sb
        .ofctl("dump-groups", bridge, &["--no-names"])
        .unwrap_or_else(|e| panic!("dumping {bridge}'s groups: {e}"))
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("group_id="))
        .map(str::to_string)
        .collect::<Vec<_>>();
    let counts = (
        flows.lines().filter(|l| !l.trim().is_empty()).count() as u64,
        groups.len() as u64,
    );
    (flows, groups, counts)
}

/// How many flows and groups `bridge` holds.
fn count_state(sb: &Sandbox, bridge: &str) -> (u64, u64) {
    dumped(sb, bridge).2
}

impl AnchorFiles {
    /// Dumps `bridge`'s flows and groups.
    pub fn dump(sb: &Sandbox, bridge: &str) -> Self {
        let (flows, groups, counts) = dumped(sb, bridge);
        let files = AnchorFiles {
            flows: sb.dir().join("anchor-flows.txt"),
            groups: sb.dir().join("anchor-groups.txt"),
            counts,
        };
        std::fs::write(&files.flows, flows).unwrap_or_else(|e| panic!("writing the flows: {e}"));
        std::fs::write(&files.groups, groups.join("\n") + "\n")
            .unwrap_or_else(|e| panic!("writing the groups: {e}"));
        files
    }

    /// Loads the dumped state onto `bridge`, which the caller made empty (the daemon gone, so
    /// that only `ovs-ofctl` and `ovs-vswitchd` run), and checks that it holds all of it.
    pub fn load(&self, sb: &Sandbox, bridge: &str) -> Anchor {
        let vswitchd = sb
            .vswitchd_pid()
            .expect("the sandbox's ovs-vswitchd pidfile");
        let before = (children_cpu_time(), cpu_time(vswitchd));
        let start = Instant::now();
        for (command, file) in [("add-groups", &self.groups), ("add-flows", &self.flows)] {
            sb.ofctl(command, bridge, &["--bundle", &file.to_string_lossy()])
                .unwrap_or_else(|e| panic!("ovs-ofctl {command}: {e}"));
        }
        let time = start.elapsed();
        let cpu = (
            children_cpu_time() - before.0,
            cpu_time(vswitchd) - before.1,
        );
        assert_eq!(
            count_state(sb, bridge),
            self.counts,
            "ovs-ofctl installed everything"
        );
        Anchor { time, cpu }
    }
}

/// A comma-separated list of numbers from environment variable `name`, else `default`.
/// Panics on a list that names none (a bench that cannot run should stop loudly).
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => {
            let list: Vec<usize> = v.split(',').filter_map(|s| s.trim().parse().ok()).collect();
            assert!(!list.is_empty(), "{name}={v:?} names no number");
            list
        }
        Err(_) => default.to_vec(),
    }
}

/// The optimized `svcflow` binary (`SVCFLOW_BIN`, or `target/release/svcflow` under
/// `cargo bench`); panics, saying how to build it, when there is none or it is a debug build.
pub fn release_daemon(bench: &str) -> PathBuf {
    let how = format!(
        "the {bench} bench runs the optimized daemon: run `cargo build --release -p svcflow` \
         first (then `cargo bench -p ovs-tests --bench {bench}`), or set SVCFLOW_BIN to a \
         release svcflow binary"
    );
    let path = svcflow_binary().unwrap_or_else(|e| panic!("{how}\n({e})"));
    assert!(path.is_file(), "{} does not exist: {how}", path.display());
    if std::env::var_os("SVCFLOW_BIN").is_none()
        && path.components().any(|c| c.as_os_str() == "debug")
    {
        panic!("{} is a debug build: {how}", path.display());
    }
    path
}

/// The 50th and 99th percentiles of `samples` (sorted in place; not empty).
pub fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Process `pid`'s peak resident set (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM")
}

/// Process `pid`'s resident set now (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status of the daemon: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("/proc/{pid}/status has no {field}"))
}

/// The CPU time process `pid` has used so far (user and system, all its threads), from
/// `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    stat_ticks(&pid.to_string(), 11)
}

/// What `/proc/PID/stat` says of process `pid` so far: its minor page faults and its user
/// and kernel CPU time (all its threads). Two readings' difference shows where a load's
/// CPU went: a fault costs the kernel's time, and memory the allocator gives back and takes
/// again moments later costs faults (`docs/performance.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Minor page faults.
    pub minor_faults: u64,
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in the kernel.
    pub kernel: Duration,
}

impl ProcStat {
    /// Process `pid`'s counters now.
    pub fn of(pid: u32) -> Self {
        let fields = stat_fields(&pid.to_string());
        let count = |at: usize| fields.get(at).copied().unwrap_or(0);
        ProcStat {
            minor_faults: count(7),
            user: ticks(count(11)),
            kernel: ticks(count(12)),
        }
    }

    /// Its CPU time, user and kernel.
    pub fn cpu(self) -> Duration {
        self.user + self.kernel
    }

    /// What happened between `earlier` and this reading.
    pub fn since(self, earlier: ProcStat) -> ProcStat {
        ProcStat {
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            user: self.user.saturating_sub(earlier.user),
            kernel: self.kernel.saturating_sub(earlier.kernel),
        }
    }
}

/// The numeric fields of `/proc/<which>/stat` (read once), counted after the command name
/// (which is in parentheses and may hold spaces); at least the 13 that hold the children's
/// CPU times.
fn stat_fields(which: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{which}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{which}/stat: {e}"));
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    assert!(fields.len() > 14, "/proc/{which}/stat is too short");
    fields
}

/// Clock ticks as time.
fn ticks(t: u64) -> Duration {
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_nanos(t * 1_000_000_000 / hz)
}

/// The CPU time this process's waited-for children have used so far (user and system).
pub fn children_cpu_time() -> Duration {
    stat_ticks("self", 13)
}

/// The sum of two clock-tick fields of `/proc/<which>/stat`, `at` and the one after it,
/// counted after the command name (which is in parentheses and may hold spaces).
fn stat_ticks(which: &str, at: usize) -> Duration {
    let fields = stat_fields(which);
    ticks(fields[at] + fields[at + 1])
}

/// What a command prints, trimmed (or why it could not run), for a bench's header.
pub fn command_output(argv: &[&str]) -> String {
    std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({}: {e})", argv[0]))
}

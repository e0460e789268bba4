//! What the benches that drive the real daemon share: their sizes from the environment, the
//! optimized daemon binary, percentiles, and reading a process's peak memory.

use std::path::PathBuf;
use std::time::Duration;

use crate::svcflow::svcflow_binary;

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

/// The CPU time this process's waited-for children have used so far (user and system).
pub fn children_cpu_time() -> Duration {
    stat_ticks("self", 13)
}

/// The sum of two clock-tick fields of `/proc/<which>/stat`, `at` and the one after it,
/// counted after the command name (which is in parentheses and may hold spaces).
fn stat_ticks(which: &str, at: usize) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{which}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{which}/stat: {e}"));
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields
        .get(at..at + 2)
        .unwrap_or_else(|| panic!("/proc/{which}/stat is too short"))
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// What a command prints, trimmed (or why it could not run), for a bench's header.
pub fn command_output(argv: &[&str]) -> String {
    std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({}: {e})", argv[0]))
}

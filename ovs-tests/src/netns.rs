//! Network namespace names, and reaping sandboxes whose test process died.

use std::path::Path;

use crate::cmd;

/// Every namespace a sandbox creates starts with this prefix, followed by the owning
/// process id: `svcf-<pid>-<seq>` for a node and `svcf-<pid>-<seq>-<host>` for a host.
pub const NETNS_PREFIX: &str = "svcf-";

/// Lists the network namespaces that carry [`NETNS_PREFIX`].
pub fn leftover_namespaces() -> Vec<String> {
    list()
        .into_iter()
        .filter(|n| n.starts_with(NETNS_PREFIX))
        .collect()
}

/// All named network namespaces.
pub fn list() -> Vec<String> {
    // `ip netns list` prints "name (id: N)" for namespaces that have an id.
    cmd::run(&["ip", "netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Deletes a namespace after killing every process still inside it.
pub fn delete(name: &str) {
    kill_all_in(name);
    let _ = cmd::run(&["ip", "netns", "del", name]);
}

/// Kills (SIGKILL) every process inside namespace `name`. These are all processes the
/// sandbox started, since it created the namespace.
pub fn kill_all_in(name: &str) {
    let pids = cmd::run(&["ip", "netns", "pids", name]).unwrap_or_default();
    for pid in pids.split_whitespace() {
        let _ = cmd::run(&["kill", "-9", pid]);
    }
}

/// Reaps namespaces and daemons of sandboxes whose owning process no longer exists.
pub fn reap_dead_sandboxes(temp_root: &Path) {
    for name in leftover_namespaces() {
        if let Some(pid) = owner_pid(&name) {
            if !process_alive(pid) {
                delete(&name);
            }
        }
    }
    let Ok(entries) = std::fs::read_dir(temp_root) else {
        return;
    };
    for entry in entries.flatten() {
        let dir_name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = dir_name
            .strip_prefix(NETNS_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if process_alive(pid) {
            continue;
        }
        // The ovsdb-server runs outside any namespace; its pidfile names it.
        let pidfile = entry.path().join("run/ovsdb-server.pid");
        if let Ok(text) = std::fs::read_to_string(&pidfile) {
            let daemon_pid = text.trim();
            if is_ovs_daemon(daemon_pid) {
                let _ = cmd::run(&["kill", "-9", daemon_pid]);
            }
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

fn owner_pid(namespace: &str) -> Option<u32> {
    namespace
        .strip_prefix(NETNS_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// Whether a process with this id exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

fn is_ovs_daemon(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|comm| comm.trim().starts_with("ovs"))
        .unwrap_or(false)
}

//! Hosts: network namespaces attached to a bridge by a veth pair, and processes inside them.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{SandboxError, cmd};

/// What a new host looks like.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Short name, at most 15 bytes: it also names the veth end on the bridge.
    pub name: String,
    /// Address with prefix length, e.g. `10.0.0.2/24`; empty for an IPv6-only host.
    pub ip: String,
    /// MAC address of the host's `eth0`.
    pub mac: String,
    /// The OpenFlow port number requested for the bridge end.
    pub ofport: u16,
    /// Default gateway, if any.
    pub gateway: Option<String>,
    /// An IPv6 address with prefix length (a dual-stack host), e.g. `fd00:10:244::11/64`.
    pub ip6: Option<String>,
    /// The IPv6 default gateway, if any.
    pub gateway6: Option<String>,
}

impl HostSpec {
    /// A host named `name` with address `ip` (with prefix), MAC `mac`, on port `ofport`.
    pub fn new(name: &str, ip: &str, mac: &str, ofport: u16) -> Self {
        Self {
            name: name.to_string(),
            ip: ip.to_string(),
            mac: mac.to_string(),
            ofport,
            gateway: None,
            ip6: None,
            gateway6: None,
        }
    }

    /// An IPv6-only host: no IPv4 address ([`HostSpec::ip`] is empty), `ip6` (with prefix
    /// length) and, if given, an IPv6 default route.
    pub fn ipv6_only(
        name: &str,
        ip6: &str,
        mac: &str,
        ofport: u16,
        gateway6: Option<&str>,
    ) -> Self {
        Self::new(name, "", mac, ofport).with_ipv6(ip6, gateway6)
    }

    /// Adds an IPv6 address (with prefix length) and, if given, an IPv6 default route.
    pub fn with_ipv6(mut self, ip6: &str, gateway6: Option<&str>) -> Self {
        self.ip6 = Some(ip6.to_string());
        self.gateway6 = gateway6.map(str::to_string);
        self
    }

    /// The IPv6 address without its prefix length.
    pub fn addr6(&self) -> Option<&str> {
        self.ip6.as_deref().and_then(|ip| ip.split('/').next())
    }

    /// Adds a default route via `gateway`.
    pub fn with_gateway(mut self, gateway: &str) -> Self {
        self.gateway = Some(gateway.to_string());
        self
    }

    /// The address without its prefix length.
    pub fn addr(&self) -> &str {
        self.ip.split('/').next().unwrap_or(&self.ip)
    }
}

/// A host in a sandbox: a network namespace with `eth0` on a bridge.
#[derive(Debug, Clone)]
pub struct Host {
    /// How it was made.
    pub spec: HostSpec,
    /// The bridge it is attached to.
    pub bridge: String,
    /// Its network namespace.
    pub netns: String,
}

impl Host {
    /// The host's IP address, without prefix length.
    pub fn ip(&self) -> &str {
        self.spec.addr()
    }

    /// The host's IPv6 address, without prefix length, if it has one.
    pub fn ip6(&self) -> Option<&str> {
        self.spec.addr6()
    }

    /// The host's MAC address.
    pub fn mac(&self) -> &str {
        &self.spec.mac
    }

    /// The OpenFlow port of its veth end on the bridge.
    pub fn ofport(&self) -> u16 {
        self.spec.ofport
    }

    /// The name of its veth end on the bridge (in the node namespace).
    pub fn port_name(&self) -> &str {
        &self.spec.name
    }

    /// Runs a command inside the host and returns its stdout; fails on a non-zero exit.
    pub fn run(&self, argv: &[&str]) -> Result<String, SandboxError> {
        cmd::run(&netns_argv(&self.netns, argv))
    }

    /// Runs a command inside the host and returns its whole output, whatever its status.
    pub fn output(&self, argv: &[&str]) -> Result<Output, SandboxError> {
        cmd::output_env(&netns_argv(&self.netns, argv), &[])
    }

    /// Starts a long-running command inside the host. It is killed when the [`Process`] drops,
    /// and in any case when the sandbox is torn down.
    pub fn spawn(&self, argv: &[&str]) -> Result<Process, SandboxError> {
        Process::spawn(&netns_argv(&self.netns, argv))
    }
}

/// `ip netns exec NS argv...`
pub(crate) fn netns_argv<'a>(netns: &'a str, argv: &[&'a str]) -> Vec<&'a str> {
    let mut full = vec!["ip", "netns", "exec", netns];
    full.extend_from_slice(argv);
    full
}

/// A process started in a host. Killed on drop.
#[derive(Debug)]
pub struct Process {
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
    command: String,
}

impl Process {
    fn spawn(argv: &[&str]) -> Result<Self, SandboxError> {
        let (program, args) = argv.split_first().ok_or(SandboxError::EmptyCommand)?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: (*program).to_string(),
                source,
            })?;
        let stdout = child.stdout.take().map(BufReader::new);
        Ok(Self {
            child,
            stdout,
            command: argv.join(" "),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads stdout lines until one equals `line`, e.g. a server's `ready`.
    pub fn wait_for_line(&mut self, line: &str, timeout: Duration) -> Result<(), SandboxError> {
        let Some(mut reader) = self.stdout.take() else {
            return Err(SandboxError::Invalid("stdout already consumed".into()));
        };
        let wanted = line.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        // A blocking read on a thread, so the wait can time out.
        std::thread::spawn(move || {
            let mut text = String::new();
            let found = loop {
                text.clear();
                match reader.read_line(&mut text) {
                    Ok(0) | Err(_) => break false,
                    Ok(_) if text.trim_end() == wanted => break true,
                    Ok(_) => {}
                }
            };
            let _ = tx.send((found, reader));
        });
        match rx.recv_timeout(timeout) {
            Ok((true, reader)) => {
                self.stdout = Some(reader);
                Ok(())
            }
            Ok((false, _)) => Err(SandboxError::Invalid(format!(
                "`{}` closed its output before printing `{line}`",
                self.command
            ))),
            Err(_) => Err(SandboxError::Timeout {
                what: format!("`{line}` from `{}`", self.command),
                after: timeout,
            }),
        }
    }

    /// Kills the process and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the `svcflow-probe` binary is: `$SVCFLOW_PROBE`, or next to the running test binary's
/// directory (`target/<profile>/svcflow-probe`), as Cargo lays it out.
pub fn probe_binary() -> Result<std::path::PathBuf, SandboxError> {
    if let Some(path) = std::env::var_os("SVCFLOW_PROBE") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe()?;
    let candidates = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("svcflow-probe"));
    for candidate in candidates {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(SandboxError::Invalid(
        "svcflow-probe not found: build it with `cargo build -p ovs-tests` or set SVCFLOW_PROBE"
            .into(),
    ))
}

/// The outcome of one probe attempt: the backend that answered, or why none did.
pub type Attempt = Result<String, String>;

impl Host {
    /// Starts `svcflow-probe serve NAME LISTEN…` (e.g. `tcp:8080`) and waits until it is ready.
    pub fn serve(&self, name: &str, listens: &[&str]) -> Result<Process, SandboxError> {
        probe_serve(&self.netns, name, listens)
    }

    /// Runs `svcflow-probe connect PROTO TARGET --count N EXTRA…` and returns each attempt.
    pub fn connect(
        &self,
        proto: &str,
        target: &str,
        count: u32,
        extra: &[&str],
    ) -> Result<Vec<Attempt>, SandboxError> {
        probe_connect(&self.netns, proto, target, count, extra)
    }
}

/// Starts `svcflow-probe serve NAME LISTENS…` inside `netns` and waits until it listens.
pub(crate) fn probe_serve(
    netns: &str,
    name: &str,
    listens: &[&str],
) -> Result<Process, SandboxError> {
    let probe = probe_binary()?;
    let probe = probe.to_string_lossy();
    let mut argv = vec![probe.as_ref(), "serve", name];
    argv.extend_from_slice(listens);
    let mut process = Process::spawn(&netns_argv(netns, &argv))?;
    process.wait_for_line("ready", Duration::from_secs(10))?;
    Ok(process)
}

/// Runs `svcflow-probe connect` inside `netns` and returns each attempt.
pub(crate) fn probe_connect(
    netns: &str,
    proto: &str,
    target: &str,
    count: u32,
    extra: &[&str],
) -> Result<Vec<Attempt>, SandboxError> {
    let probe = probe_binary()?;
    let probe = probe.to_string_lossy();
    let count = count.to_string();
    let mut argv = vec![probe.as_ref(), "connect", proto, target, "--count", &count];
    argv.extend_from_slice(extra);
    let out = cmd::run(&netns_argv(netns, &argv))?;
    Ok(out
        .lines()
        .map(|line| match line.split_once(' ') {
            Some(("ok", name)) => Ok(name.to_string()),
            Some((_, why)) => Err(why.to_string()),
            None => Err(line.to_string()),
        })
        .collect())
}

/// Counts attempts per backend name; failures count under `err <reason>`.
pub fn tally(attempts: &[Attempt]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for attempt in attempts {
        let key = match attempt {
            Ok(name) => name.clone(),
            Err(why) => format!("err {why}"),
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// One line of a running probe (`svcflow-probe loop` or `hold`): what happened, how long the
/// attempt or exchange took, and when the test read the line (just after the attempt ended).
#[derive(Debug, Clone)]
pub struct Sample {
    /// When the line was read.
    pub at: Instant,
    /// The backend that answered, or why none did.
    pub outcome: Attempt,
    /// How long the attempt (or the ping's round trip) took.
    pub took: Duration,
}

impl Sample {
    /// When the attempt started (as far as the test can tell).
    pub fn started(&self) -> Instant {
        self.at.checked_sub(self.took).unwrap_or(self.at)
    }

    fn parse(at: Instant, line: &str) -> Self {
        let mut words = line.split(' ');
        let (status, what, took) = (words.next(), words.next(), words.next());
        let took = took
            .and_then(|ms| ms.parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        let outcome = match (status, what) {
            (Some("ok"), Some(name)) => Ok(name.to_string()),
            (Some("err"), Some(why)) => Err(why.to_string()),
            _ => Err(format!("unparsed `{line}`")),
        };
        Sample { at, outcome, took }
    }
}

/// A probe that runs until told to stop, whose output lines are collected as they come.
/// Killed on drop.
#[derive(Debug)]
pub struct ProbeStream {
    child: Child,
    stdin: Option<ChildStdin>,
    samples: Arc<Mutex<Vec<Sample>>>,
    reader: Option<JoinHandle<()>>,
    command: String,
}

impl ProbeStream {
    fn spawn(argv: &[&str]) -> Result<Self, SandboxError> {
        let (program, args) = argv.split_first().ok_or(SandboxError::EmptyCommand)?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: (*program).to_string(),
                source,
            })?;
        let stdin = child.stdin.take();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stdout.take().map(|stdout| {
            let samples = samples.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let sample = Sample::parse(Instant::now(), &line);
                    if let Ok(mut samples) = samples.lock() {
                        samples.push(sample);
                    }
                }
            })
        });
        Ok(Self {
            child,
            stdin,
            samples,
            reader,
            command: argv.join(" "),
        })
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until at least `n` samples have arrived.
    pub fn wait_for_samples(&self, n: usize, timeout: Duration) -> Result<(), SandboxError> {
        cmd::wait_for(
            &format!("{n} results from `{}`", self.command),
            timeout,
            || (self.samples().len() >= n).then_some(()),
        )
    }

    /// Whether the probe is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Closes the probe's stdin, which tells it to stop after the attempt in progress, waits
    /// up to 10 s for it to exit, and returns every sample.
    pub fn stop(&mut self) -> Result<Vec<Sample>, SandboxError> {
        drop(self.stdin.take());
        let exited = cmd::wait_for(
            &format!("`{}` to stop", self.command),
            Duration::from_secs(10),
            || self.child.try_wait().ok().flatten(),
        );
        if exited.is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        exited.map(|_| self.samples())
    }
}

impl Drop for ProbeStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    /// Starts `svcflow-probe loop PROTO TARGET EXTRA…`: new connections (or UDP requests)
    /// one after another until [`ProbeStream::stop`].
    pub fn probe_loop(
        &self,
        proto: &str,
        target: &str,
        extra: &[&str],
    ) -> Result<ProbeStream, SandboxError> {
        let probe = probe_binary()?;
        let probe = probe.to_string_lossy();
        let mut argv = vec![probe.as_ref(), "loop", proto, target];
        argv.extend_from_slice(extra);
        ProbeStream::spawn(&netns_argv(&self.netns, &argv))
    }

    /// A failover client: a new TCP connection to `target` every 25 ms (each may take 3 s),
    /// returned once 20 have been made, so the loop is known to run.
    pub fn connection_loop(&self, target: &str) -> Result<ProbeStream, SandboxError> {
        let probes = self.probe_loop("tcp", target, &["--timeout-ms", "3000", "--gap-ms", "25"])?;
        probes.wait_for_samples(20, std::time::Duration::from_secs(30))?;
        Ok(probes)
    }

    /// Starts `svcflow-probe hold TARGET EXTRA…`: one long-lived TCP connection that exchanges
    /// a line every `--gap-ms` until [`ProbeStream::stop`]; it ends at the first failure.
    pub fn probe_hold(&self, target: &str, extra: &[&str]) -> Result<ProbeStream, SandboxError> {
        let probe = probe_binary()?;
        let probe = probe.to_string_lossy();
        let mut argv = vec![probe.as_ref(), "hold", target];
        argv.extend_from_slice(extra);
        ProbeStream::spawn(&netns_argv(&self.netns, &argv))
    }
}

//! `svcflow-lab`: a mininet-style lab of Open vSwitch nodes driven by one `svcflow run`,
//! brought up from a shell and left running.
//!
//! ```text
//! svcflow-lab up TOPOLOGY.toml [--dir DIR] [--log-level LEVEL]
//! svcflow-lab exec NAME [--dir DIR] -- COMMAND [ARG]...
//! svcflow-lab status [--dir DIR]
//! svcflow-lab down [--dir DIR]
//! ```
//!
//! `DIR` (default `/tmp/svcflow-lab`) holds the lab's record. `up` starts a keeper, this
//! binary's hidden `keep` command, in a process group of its own with its output in
//! `DIR/lab.log`. The keeper brings the lab up (`ovs_tests::lab::Lab::up`), writes
//! `DIR/state.json`, and then holds the lab: the switches, svcflow, the pods' servers are its
//! children and every namespace carries its process id, so nothing reaps them while it lives.
//! `up` returns once the state is written (or fails with the keeper's log). `down` asks the
//! keeper over `DIR/control.sock` to tear the lab down and waits for it; if the keeper is
//! gone, `down` removes what `state.json` lists itself.
//!
//! `exec` runs a command in the network namespace of a pod, a node (with `OVS_RUNDIR` and
//! friends set, so `ovs-vsctl show` and `ovs-ofctl dump-flows br-int` work), the outside
//! host, `ctl` (svcflow's namespace, where its REST northbound is `127.0.0.1:8181`) or
//! `underlay` (the router), with the terminal's stdin and stdout, and exits with its status.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, LabState, Topology};

const DEFAULT_DIR: &str = "/tmp/svcflow-lab";
const USAGE: &str = "usage:
  svcflow-lab up TOPOLOGY.toml [--dir DIR] [--log-level LEVEL]
  svcflow-lab exec NAME [--dir DIR] -- COMMAND [ARG]...
  svcflow-lab status [--dir DIR]
  svcflow-lab down [--dir DIR]
DIR defaults to /tmp/svcflow-lab. NAME is a pod, a node, the outside host, `ctl` (svcflow's
namespace) or `underlay` (the router's).";
/// How long `up` waits for the keeper to bring the lab up.
const UP_TIMEOUT: Duration = Duration::from_secs(300);
/// How long `down` waits for the keeper to tear it down.
const DOWN_TIMEOUT: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("svcflow-lab: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The parsed command line: positional words, `--dir`, `--log-level`, and what follows `--`.
struct Args {
    words: Vec<String>,
    dir: PathBuf,
    log_level: String,
    rest: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        words: Vec::new(),
        dir: PathBuf::from(DEFAULT_DIR),
        log_level: "info".into(),
        rest: Vec::new(),
    };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--" => {
                parsed.rest = iter.by_ref().cloned().collect();
            }
            "--dir" => parsed.dir = PathBuf::from(iter.next().ok_or(USAGE)?),
            "--log-level" => parsed.log_level = iter.next().ok_or(USAGE)?.clone(),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => {
                if let Some(dir) = arg.strip_prefix("--dir=") {
                    parsed.dir = PathBuf::from(dir);
                } else if let Some(level) = arg.strip_prefix("--log-level=") {
                    parsed.log_level = level.to_string();
                } else {
                    parsed.words.push(arg.clone());
                }
            }
        }
    }
    Ok(parsed)
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let a = parse(args)?;
    let words: Vec<&str> = a.words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["up", topology] => up(Path::new(topology), &a.dir, &a.log_level),
        ["keep", topology] => keep(Path::new(topology), &a.dir, &a.log_level),
        ["exec", name] if !a.rest.is_empty() => exec(name, &a.dir, &a.rest),
        ["status"] => status(&a.dir),
        ["down"] => down(&a.dir),
        _ => Err(USAGE.into()),
    }
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

fn read_state(dir: &Path) -> Result<Option<LabState>, String> {
    let path = state_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn require_state(dir: &Path) -> Result<LabState, String> {
    read_state(dir)?.ok_or_else(|| {
        format!(
            "no lab is up in {} (no state.json): run `svcflow-lab up TOPOLOGY.toml`",
            dir.display()
        )
    })
}

fn keeper_alive(state: &LabState) -> bool {
    state
        .keeper_pid
        .is_some_and(ovs_tests::lab::process_is_alive)
}

fn forget(dir: &Path) {
    let _ = std::fs::remove_file(state_path(dir));
    let _ = std::fs::remove_file(socket_path(dir));
}

fn log_tail(dir: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(dir.join("lab.log")).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn up(topology: &Path, dir: &Path, log_level: &str) -> Result<ExitCode, String> {
    // Refuse a bad file here, before anything starts.
    Topology::load(topology).map_err(|e| e.to_string())?;
    let topology = topology
        .canonicalize()
        .map_err(|e| format!("{}: {e}", topology.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Some(state) = read_state(&dir)? {
        if keeper_alive(&state) {
            return Err(format!(
                "lab {} is already up in {}: run `svcflow-lab down --dir {}` first",
                state.id,
                dir.display(),
                dir.display()
            ));
        }
        eprintln!(
            "svcflow-lab: removing what is left of lab {}, whose keeper is gone",
            state.id
        );
        state.force_down();
    }
    forget(&dir);
    let log_path = dir.join("lab.log");
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut keeper = Command::new(exe)
        .arg("keep")
        .arg(&topology)
        .arg("--dir")
        .arg(&dir)
        .arg("--log-level")
        .arg(log_level)
        // Its own process group: a Ctrl-C in this terminal later does not reach the lab.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| format!("cannot start the keeper: {e}"))?;
    println!(
        "svcflow-lab: bringing up {} (keeper pid {}, log {})",
        topology.display(),
        keeper.id(),
        log_path.display()
    );
    let started = Instant::now();
    let state = loop {
        if let Some(state) = read_state(&dir)?.filter(|s| s.keeper_pid == Some(keeper.id())) {
            break state;
        }
        if let Ok(Some(status)) = keeper.try_wait() {
            return Err(format!(
                "the lab did not come up (keeper {status}); {} ends:\n{}",
                log_path.display(),
                log_tail(&dir, 30)
            ));
        }
        if started.elapsed() > UP_TIMEOUT {
            return Err(format!(
                "the lab is not up after {UP_TIMEOUT:?}; see {} (`svcflow-lab down` stops it)",
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!(
        "svcflow-lab: up in {:.1} s\n",
        started.elapsed().as_secs_f64()
    );
    print!("{}", state.status());
    let d = dir.display();
    println!(
        "\ntry: svcflow-lab exec POD --dir {d} -- ping -c1 IP\n     \
         svcflow-lab exec ctl --dir {d} -- curl -s {}/service:service-information\n     \
         svcflow-lab status --dir {d}; svcflow-lab down --dir {d}",
        state.rest
    );
    Ok(ExitCode::SUCCESS)
}

/// The keeper: brings the lab up, records it, and holds it until `down` asks.
fn keep(topology: &Path, dir: &Path, log_level: &str) -> Result<ExitCode, String> {
    let topology = Topology::load(topology).map_err(|e| e.to_string())?;
    let options = LabOptions {
        log_level: log_level.to_string(),
        ..LabOptions::default()
    };
    let started = Instant::now();
    let lab = Lab::up(&topology, &options).map_err(|e| format!("cannot bring the lab up: {e}"))?;
    let socket = socket_path(dir);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    let mut state = lab.state();
    state.keeper_pid = Some(std::process::id());
    let text = serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?;
    let tmp = dir.join("state.json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, state_path(dir)).map_err(|e| e.to_string())?;
    println!(
        "lab {} is up after {:.1} s; waiting for `svcflow-lab down`",
        lab.id(),
        started.elapsed().as_secs_f64()
    );
    let mut requester = loop {
        let (stream, _) = listener.accept().map_err(|e| e.to_string())?;
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_ok() && line.trim() == "down" {
            break stream;
        }
        let mut stream = stream;
        let _ = writeln!(stream, "error: unknown request `{}`", line.trim());
    };
    println!("tearing lab {} down", lab.id());
    let result = lab.down();
    forget(dir);
    let reply = match &result {
        Ok(()) => "down".to_string(),
        Err(e) => format!("error: {e}"),
    };
    let _ = writeln!(requester, "{reply}");
    println!("{reply}");
    result
        .map(|()| ExitCode::SUCCESS)
        .map_err(|e| e.to_string())
}

fn ask_down(dir: &Path) -> Result<String, String> {
    let mut stream = UnixStream::connect(socket_path(dir)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(DOWN_TIMEOUT))
        .map_err(|e| e.to_string())?;
    writeln!(stream, "down").map_err(|e| e.to_string())?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .map_err(|e| e.to_string())?;
    Ok(reply.trim().to_string())
}

fn down(dir: &Path) -> Result<ExitCode, String> {
    let Some(state) = read_state(dir)? else {
        println!("svcflow-lab: no lab is up in {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    };
    let started = Instant::now();
    if keeper_alive(&state) {
        match ask_down(dir) {
            Ok(reply) if reply == "down" => {}
            Ok(reply) => eprintln!("svcflow-lab: the keeper answered: {reply}"),
            Err(e) => eprintln!("svcflow-lab: the keeper did not answer ({e}); cleaning up"),
        }
        let keeper = state.keeper_pid.unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ovs_tests::lab::process_is_alive(keeper) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        eprintln!(
            "svcflow-lab: the keeper of lab {} is gone; removing what state.json lists",
            state.id
        );
    }
    // Whatever the keeper did, make sure: this only touches what is still there.
    let left = state.force_down();
    forget(dir);
    if left.is_empty() {
        println!(
            "svcflow-lab: lab {} is down ({:.1} s)",
            state.id,
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!("namespaces left behind: {left:?}"))
    }
}

fn status(dir: &Path) -> Result<ExitCode, String> {
    let state = require_state(dir)?;
    if !keeper_alive(&state) {
        eprintln!(
            "svcflow-lab: the keeper of lab {} is gone, so nothing holds the lab: run \
             `svcflow-lab down --dir {}`",
            state.id,
            dir.display()
        );
    }
    print!("{}", state.status());
    Ok(ExitCode::SUCCESS)
}

fn exec(name: &str, dir: &Path, argv: &[String]) -> Result<ExitCode, String> {
    let state = require_state(dir)?;
    let netns = state.netns_of(name).ok_or_else(|| {
        format!(
            "no pod, node or host `{name}` in lab {} (see `svcflow-lab status`)",
            state.id
        )
    })?;
    let mut command = Command::new("ip");
    command.args(["netns", "exec", netns]).args(argv);
    if let Some(node) = state.node(name) {
        command.envs(node.ovs_env());
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run `ip netns exec`: {e}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

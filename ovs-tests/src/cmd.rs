//! Running the OVS and iproute2 tools, with timeouts and errors that say what failed.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::SandboxError;

/// How long any one helper command may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `argv` to completion and returns its stdout, or an error carrying its stderr.
pub fn run(argv: &[&str]) -> Result<String, SandboxError> {
    run_env(argv, &[])
}

/// Like [`run`], with extra environment variables.
pub fn run_env(argv: &[&str], env: &[(&str, &str)]) -> Result<String, SandboxError> {
    stdout_of(argv, output_env(argv, env)?)
}

/// Like [`run`], in working directory `dir`.
pub fn run_in(argv: &[&str], dir: &Path) -> Result<String, SandboxError> {
    stdout_of(argv, output_in(argv, &[], Some(dir))?)
}

/// The stdout of a command that succeeded, or an error carrying its stderr.
fn stdout_of(argv: &[&str], output: Output) -> Result<String, SandboxError> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(SandboxError::Command {
            command: argv.join(" "),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// Runs `argv` and returns its whole output, whatever its exit status.
pub fn output_env(argv: &[&str], env: &[(&str, &str)]) -> Result<Output, SandboxError> {
    output_in(argv, env, None)
}

fn output_in(
    argv: &[&str],
    env: &[(&str, &str)],
    dir: Option<&Path>,
) -> Result<Output, SandboxError> {
    let (program, args) = argv.split_first().ok_or(SandboxError::EmptyCommand)?;
    let mut command = Command::new(program);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().map_err(|source| SandboxError::Spawn {
        program: (*program).to_string(),
        source,
    })?;
    wait_output(child, COMMAND_TIMEOUT, &argv.join(" "))
}

/// Waits for a child with piped stdout and stderr, killing it after `timeout`.
pub fn wait_output(
    mut child: Child,
    timeout: Duration,
    what: &str,
) -> Result<Output, SandboxError> {
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(SandboxError::Io)? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SandboxError::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let join = |handle: Option<std::thread::JoinHandle<Vec<u8>>>| {
        handle.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    Ok(Output {
        status,
        stdout: join(stdout),
        stderr: join(stderr),
    })
}

fn drain<R: Read + Send + 'static>(mut reader: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = reader.read_to_end(&mut buf);
        buf
    })
}

/// Polls `probe` every 20 ms until it returns `Some`, or fails after `timeout`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, SandboxError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to `timeout`) until `probe` gives the same `Some` value for `hold` without a
/// break, and returns it: a state that has settled, not one passing through.
pub fn wait_stable<T: PartialEq>(
    what: &str,
    timeout: Duration,
    hold: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, SandboxError> {
    let deadline = Instant::now() + timeout;
    let mut held: Option<(T, Instant)> = None;
    loop {
        match (probe(), held.take()) {
            (Some(now), Some((was, since))) if now == was => {
                if since.elapsed() >= hold {
                    return Ok(now);
                }
                held = Some((now, since));
            }
            (Some(now), _) => held = Some((now, Instant::now())),
            (None, _) => {}
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks that `program` is on `PATH`.
pub fn require_program(program: &str, package: &str) -> Result<(), SandboxError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    require_program_in(program, package, &path)
}

fn require_program_in(
    program: &str,
    package: &str,
    path: impl AsRef<std::ffi::OsStr>,
) -> Result<(), SandboxError> {
    let found = std::env::split_paths(&path).any(|dir| dir.join(program).is_file());
    if found {
        Ok(())
    } else {
        Err(SandboxError::Missing {
            program: program.to_string(),
            package: package.to_string(),
        })
    }
}

/// A TCP port on loopback that nothing listened on a moment ago (bound and released).
///
/// # Panics
/// If no loopback port can be bound.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// A TCP port on loopback that nothing listened on a moment ago (bound and released), and
/// that this process has not handed out before: tests running side by side each start their
/// daemons on ports picked here, and a port is free between its release and its daemon's
/// bind.
pub fn try_free_port() -> std::io::Result<u16> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    // Held until a new port is found, so the kernel offers another one each time.
    let mut held = Vec::new();
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_names_the_package_to_install() {
        let err =
            require_program_in("ovs-vswitchd", "openvswitch-switch", "/nonexistent").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`ovs-vswitchd` is not installed"), "{text}");
        assert!(
            text.contains("apt-get install -y openvswitch-switch"),
            "{text}"
        );
    }

    #[test]
    fn a_free_port_is_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[test]
    fn a_present_program_is_found() {
        require_program_in("sh", "dash", "/nonexistent:/bin:/usr/bin").unwrap();
    }
}

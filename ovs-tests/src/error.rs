//! Errors from the sandbox harness.

use std::time::Duration;

/// Why the sandbox could not do what a test asked.
#[derive(Debug)]
pub enum SandboxError {
    /// A tool the harness needs is not installed.
    Missing {
        /// The program that was looked for on `PATH`.
        program: String,
        /// The Debian package that provides it.
        package: String,
    },
    /// A command could not be started.
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A command exited unsuccessfully.
    Command {
        /// The whole command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Something did not happen in time.
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the harness waited.
        after: Duration,
    },
    /// A daemon exited during start-up.
    DaemonExited {
        /// The daemon.
        daemon: String,
        /// The tail of its log.
        log_tail: String,
    },
    /// A caller asked for something invalid (a bad host name, a duplicate, ...).
    Invalid(String),
    /// An empty command line.
    EmptyCommand,
    /// Any other I/O error.
    Io(std::io::Error),
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing { program, package } => write!(
                f,
                "`{program}` is not installed, so the Open vSwitch test suite cannot run; \
                 install it with `apt-get install -y {package}` (or run scripts/install-deps.sh)"
            ),
            Self::Spawn { program, source } => write!(f, "cannot start `{program}`: {source}"),
            Self::Command {
                command,
                status,
                stderr,
            } => write!(f, "`{command}` failed ({status}): {stderr}"),
            Self::Timeout { what, after } => {
                write!(f, "timed out after {after:?} waiting for {what}")
            }
            Self::DaemonExited { daemon, log_tail } => {
                write!(
                    f,
                    "{daemon} exited during start-up; its log ends:\n{log_tail}"
                )
            }
            Self::Invalid(why) => write!(f, "invalid sandbox request: {why}"),
            Self::EmptyCommand => write!(f, "empty command line"),
            Self::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for SandboxError {}

impl From<std::io::Error> for SandboxError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

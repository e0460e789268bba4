//! A private ovsdb-server (and optionally ovs-vswitchd in a fresh network namespace) for the
//! benchmark. (Tests against a real OVS live in the `ovs-tests` crate, on its `Sandbox`.)
//! Nothing global is touched; every process is stopped by pid on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Fails (not skips) with a clear message if an OVS binary is missing.
pub fn require(bin: &str) {
    match Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => {}
        Err(e) => panic!(
            "`{bin}` is required for this test but could not be run ({e}); install openvswitch-switch 3.1"
        ),
    }
    assert!(
        Path::new(SCHEMA).exists(),
        "{SCHEMA} missing; install openvswitch-switch 3.1"
    );
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stop_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

pub struct OvsdbServer {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub tcp_port: u16,
}

impl OvsdbServer {
    pub fn start() -> OvsdbServer {
        for b in ["ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl"] {
            require(b);
        }
        let dir = tempfile::Builder::new()
            .prefix("ovsdb-test")
            .tempdir()
            .expect("tempdir");
        for d in ["run", "db", "log"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        run(Command::new("ovsdb-tool")
            .arg("create")
            .arg(dir.path().join("db/conf.db"))
            .arg(SCHEMA));
        let mut s = OvsdbServer {
            dir,
            child: None,
            tcp_port: 0,
        };
        s.spawn(0);
        s.vsctl(&["init"]);
        s
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn sock(&self) -> PathBuf {
        self.path("run/db.sock")
    }

    fn spawn(&mut self, port: u16) {
        let port_arg = port;
        let log = self.path("log/ovsdb-server.log");
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(self.sock());
        let child = Command::new("ovsdb-server")
            .arg(self.path("db/conf.db"))
            .arg(format!("--remote=punix:{}", self.sock().display()))
            .arg(format!("--remote=ptcp:{port}:127.0.0.1"))
            .arg("--remote=db:Open_vSwitch,Open_vSwitch,manager_options")
            .arg(format!(
                "--unixctl={}",
                self.path("run/ovsdb-server.ctl").display()
            ))
            .arg(format!("--log-file={}", log.display()))
            .args(["--no-chdir", "-vconsole:off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ovsdb-server");
        self.child = Some(child);
        // Wait for the socket and the TCP port (printed in the log).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let port = text
                .lines()
                .find_map(|l| l.split("listening on port ").nth(1))
                .and_then(|p| p.trim().parse::<u16>().ok());
            let port = if port_arg != 0 {
                std::net::TcpStream::connect(("127.0.0.1", port_arg))
                    .ok()
                    .map(|_| port_arg)
            } else {
                port
            };
            if let (Some(p), true) = (port, self.sock().exists()) {
                self.tcp_port = p;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "ovsdb-server did not start: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn unix_remote(&self) -> String {
        format!("unix:{}", self.sock().display())
    }
    pub fn tcp_remote(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.tcp_port)
    }

    /// `ovs-vsctl --no-wait ARGS` against this server.
    pub fn vsctl(&self, args: &[&str]) -> String {
        run(Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.unix_remote()))
            .arg("--no-wait")
            .args(args))
    }

    /// Like [`OvsdbServer::vsctl`] but returns the exit status and stderr instead of failing.
    pub fn vsctl_status(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.unix_remote()))
            .arg("--no-wait")
            .args(args)
            .output()
            .expect("ovs-vsctl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c);
        }
    }

    /// Stops and restarts the server on the same socket and TCP port.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.tcp_port;
        self.spawn(port);
    }
}

impl Drop for OvsdbServer {
    fn drop(&mut self) {
        self.stop();
    }
}

static NS_SEQ: AtomicU32 = AtomicU32::new(0);

/// ovs-vswitchd in a network namespace of its own, attached to an [`OvsdbServer`].
pub struct Vswitchd {
    ns: String,
    child: Option<Child>,
    ctl: PathBuf,
}

impl Vswitchd {
    pub fn start(db: &OvsdbServer) -> Vswitchd {
        require("ovs-vswitchd");
        let ns = format!(
            "ovsdbt{}x{}",
            std::process::id(),
            NS_SEQ.fetch_add(1, Ordering::SeqCst)
        );
        run(Command::new("ip").args(["netns", "add", &ns]));
        let ctl = db.path("run/ovs-vswitchd.ctl");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "ovs-vswitchd"])
            .arg(db.unix_remote())
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!(
                "--log-file={}",
                db.path("log/ovs-vswitchd.log").display()
            ))
            .args(["--no-chdir", "-vconsole:off"])
            .env("OVS_RUNDIR", db.path("run"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = Command::new("ip").args(["netns", "del", &ns]).status();
                panic!("spawn ovs-vswitchd: {e}");
            }
        };
        Vswitchd {
            ns,
            child: Some(child),
            ctl,
        }
    }
}

impl Drop for Vswitchd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("ovs-appctl")
                .arg("-t")
                .arg(&self.ctl)
                .args(["exit", "--cleanup"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            stop_child(&mut c);
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

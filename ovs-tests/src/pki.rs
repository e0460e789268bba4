//! A PKI made by `ovs-pki`, as an operator makes one: a switch CA and a controller CA, and
//! `-u` certificates whose common name is exactly the name given (as OVN's chassis
//! certificates), which is how svcflow knows a node by its certificate (`docs/security.md`).
//! The TLS tests and the benches that run svcflow over TLS share it.

use std::path::{Path, PathBuf};

use crate::{Sandbox, SandboxError, cmd};

/// The PKI's files, under one directory.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
}

/// A key and its certificate, as PEM files.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The private key's file.
    pub key: String,
    /// The certificate's file.
    pub cert: String,
}

impl Pki {
    /// Makes both CAs under `dir` (created if missing).
    pub fn new(dir: &Path) -> Result<Pki, SandboxError> {
        std::fs::create_dir_all(dir).map_err(SandboxError::Io)?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        pki.ovs_pki(&["init"])?;
        Ok(pki)
    }

    fn ovs_pki(&self, args: &[&str]) -> Result<(), SandboxError> {
        let dir = format!("--dir={}", self.dir.join("pki").display());
        let log = format!("--log={}", self.dir.join("ovs-pki.log").display());
        let mut argv = vec!["ovs-pki", &dir, &log];
        argv.extend_from_slice(args);
        // `req+sign` writes its files into the working directory.
        cmd::run_in(&argv, &self.dir).map(drop)
    }

    /// Signs a certificate for `name` by the `switch` or `controller` CA.
    pub fn sign(&self, name: &str, kind: &str) -> Result<Signed, SandboxError> {
        self.ovs_pki(&["-u", "req+sign", name, kind])?;
        let file = |what: &str| {
            self.dir
                .join(format!("{name}-{what}.pem"))
                .to_string_lossy()
                .into_owned()
        };
        Ok(Signed {
            key: file("privkey"),
            cert: file("cert"),
        })
    }

    /// The certificate of the `switch` or `controller` CA.
    pub fn ca(&self, kind: &str) -> String {
        self.dir
            .join(format!("pki/{kind}ca/cacert.pem"))
            .to_string_lossy()
            .into_owned()
    }

    /// A PKI in `sb`'s directory whose switch certificate, for node `node`, `sb`'s
    /// `ovs-vswitchd` and `ovsdb-server` present (`ovs-vsctl set-ssl`, trusting the
    /// controller CA); with svcflow's flags ([`Pki::daemon_flags`]).
    pub fn for_sandbox(sb: &Sandbox, node: &str) -> Result<(Pki, Vec<String>), SandboxError> {
        let pki = Pki::new(&sb.dir().join("pki-files"))?;
        let Signed { key, cert } = pki.sign(node, "switch")?;
        sb.vsctl(&["set-ssl", &key, &cert, &pki.ca("controller")])?;
        let flags = pki.daemon_flags()?;
        Ok((pki, flags))
    }

    /// svcflow's TLS flags: a controller certificate named `svcflow`, and the switch CA for
    /// its peers.
    pub fn daemon_flags(&self) -> Result<Vec<String>, SandboxError> {
        let Signed { key, cert } = self.sign("svcflow", "controller")?;
        Ok(vec![
            format!("--ssl-private-key={key}"),
            format!("--ssl-certificate={cert}"),
            format!("--ssl-ca-cert={}", self.ca("switch")),
        ])
    }
}

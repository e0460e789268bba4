//! Which connections may be plain TCP: on loopback always; beyond it only with `--insecure`,
//! which logs a warning for each. Otherwise the listeners need TLS (`--ssl-*`) and the
//! remotes `ssl:`. Pure: it reads the configuration and remote strings, nothing else.

use std::net::SocketAddr;

use crate::config::RunConfig;

/// The endpoints of `config` that would carry plain TCP beyond loopback, described for a
/// message (`OpenFlow listener 0.0.0.0:6653`, `OVSDB remote n1=tcp:10.0.0.1:6640`).
pub fn plain_beyond_loopback(config: &RunConfig) -> Vec<String> {
    let mut exposed = Vec::new();
    if config.tls.is_none() {
        let listeners = [
            ("OpenFlow listener", Some(config.openflow_listen)),
            ("OVSDB manager listener", config.ovsdb_manager_listen),
            ("REST listener", Some(config.rest_listen)),
            ("metrics listener", Some(config.metrics_listen)),
            ("health listener", Some(config.healthz_listen)),
        ];
        for (what, addr) in listeners {
            if let Some(addr) = addr.filter(|a| !a.ip().is_loopback()) {
                exposed.push(format!("{what} {addr}"));
            }
        }
    }
    for remote in &config.ovsdb_remotes {
        if plain_tcp_beyond_loopback(&remote.target) {
            exposed.push(format!("OVSDB remote {}={}", remote.node, remote.target));
        }
    }
    if let coe::rest::StoreKind::Ovsdb(members) = &config.store {
        for member in members.iter().filter(|m| plain_tcp_beyond_loopback(m)) {
            exposed.push(format!("store member {member}"));
        }
    }
    exposed
}

/// Whether an OVS-syntax remote is `tcp:` to an address other than loopback.
pub fn plain_tcp_beyond_loopback(remote: &str) -> bool {
    remote
        .strip_prefix("tcp:")
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .is_some_and(|a| !a.ip().is_loopback())
}

/// The remote to dial for a node whose OVSDB remote the REST model or Kubernetes gave
/// (`tcp:<internal-ip>:6640`): with TLS, the same address over `ssl:`; without, plain TCP
/// beyond loopback only with `--insecure`. A remote named on the command line was checked
/// at start and is dialled as given.
pub fn model_remote(remote: &str, tls: bool, insecure: bool) -> Result<String, String> {
    match remote.strip_prefix("tcp:") {
        Some(addr) if tls => Ok(format!("ssl:{addr}")),
        Some(_) if !insecure && plain_tcp_beyond_loopback(remote) => Err(format!(
            "{remote} is plain TCP beyond loopback: give svcflow --ssl-private-key, \
             --ssl-certificate and --ssl-ca-cert (it then dials ssl:), or --insecure"
        )),
        _ => Ok(remote.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_remotes_go_over_tls_when_it_is_on_and_stay_on_loopback_without_it() {
        assert_eq!(
            model_remote("tcp:10.0.0.1:6640", true, false),
            Ok("ssl:10.0.0.1:6640".to_string())
        );
        assert!(model_remote("tcp:10.0.0.1:6640", false, false).is_err());
        assert_eq!(
            model_remote("tcp:10.0.0.1:6640", false, true),
            Ok("tcp:10.0.0.1:6640".to_string())
        );
        assert_eq!(
            model_remote("tcp:127.0.0.1:6640", false, false),
            Ok("tcp:127.0.0.1:6640".to_string())
        );
        assert_eq!(
            model_remote("unix:/run/db.sock", false, false),
            Ok("unix:/run/db.sock".to_string())
        );
    }
}

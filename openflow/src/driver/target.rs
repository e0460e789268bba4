//! Connection targets in Open vSwitch syntax (`ovs-vsctl set-controller`, `ovs-ofctl`):
//! `tcp:IP:PORT`, `ssl:IP:PORT` and `unix:PATH` to dial, `ptcp:PORT[:IP]`, `pssl:PORT[:IP]`
//! and `punix:PATH` to listen.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::error::Error;

/// Where to dial a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `tcp:IP:PORT` (`[IPv6]:PORT` for IPv6).
    Tcp(SocketAddr),
    /// `ssl:IP:PORT`: TCP with TLS ([`super::DriverConfig::tls_client`]).
    Ssl(SocketAddr),
    /// `unix:PATH`, e.g. a bridge's `br-int.mgmt` socket.
    Unix(PathBuf),
}

/// Where to listen for switches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenTarget {
    /// `ptcp:PORT[:IP]`; the address defaults to 0.0.0.0, and port 0 picks a free one.
    Tcp(SocketAddr),
    /// `pssl:PORT[:IP]`: as `ptcp:`, with TLS ([`super::DriverConfig::tls_server`]).
    Ssl(SocketAddr),
    /// `punix:PATH`.
    Unix(PathBuf),
}

fn bad(target: &str, why: &'static str) -> Error {
    Error::Target {
        target: target.to_string(),
        why,
    }
}

impl Target {
    /// Parses `tcp:IP:PORT`, `ssl:IP:PORT` or `unix:PATH`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad(s, "empty path"));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        let (rest, tls) = match (s.strip_prefix("tcp:"), s.strip_prefix("ssl:")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => return Err(bad(s, "expected tcp:IP:PORT, ssl:IP:PORT or unix:PATH")),
        };
        let addr = rest
            .parse::<SocketAddr>()
            .map_err(|_| bad(s, "expected IP:PORT after tcp: or ssl:"))?;
        Ok(if tls {
            Target::Ssl(addr)
        } else {
            Target::Tcp(addr)
        })
    }
}

impl ListenTarget {
    /// Parses `ptcp:PORT[:IP]`, `pssl:PORT[:IP]` or `punix:PATH`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        if let Some(path) = s.strip_prefix("punix:") {
            if path.is_empty() {
                return Err(bad(s, "empty path"));
            }
            return Ok(ListenTarget::Unix(PathBuf::from(path)));
        }
        let (rest, tls) = match (s.strip_prefix("ptcp:"), s.strip_prefix("pssl:")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => {
                return Err(bad(
                    s,
                    "expected ptcp:PORT[:IP], pssl:PORT[:IP] or punix:PATH",
                ));
            }
        };
        let (port, ip) = match rest.split_once(':') {
            Some((port, ip)) => (port, ip.trim_start_matches('[').trim_end_matches(']')),
            None => (rest, ""),
        };
        let port = if port.is_empty() {
            6653
        } else {
            port.parse::<u16>().map_err(|_| bad(s, "bad port"))?
        };
        let ip = if ip.is_empty() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            ip.parse::<IpAddr>().map_err(|_| bad(s, "bad IP address"))?
        };
        let addr = SocketAddr::new(ip, port);
        Ok(if tls {
            ListenTarget::Ssl(addr)
        } else {
            ListenTarget::Tcp(addr)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ovs_syntax() {
        assert_eq!(
            Target::parse("tcp:127.0.0.1:6653").ok(),
            Some(Target::Tcp(SocketAddr::from(([127, 0, 0, 1], 6653))))
        );
        assert_eq!(
            Target::parse("unix:/run/br-int.mgmt").ok(),
            Some(Target::Unix("/run/br-int.mgmt".into()))
        );
        assert_eq!(
            ListenTarget::parse("ptcp:0:127.0.0.1").ok(),
            Some(ListenTarget::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))))
        );
        assert_eq!(
            ListenTarget::parse("ptcp:6653").ok(),
            Some(ListenTarget::Tcp(SocketAddr::from(([0, 0, 0, 0], 6653))))
        );
        assert_eq!(
            ListenTarget::parse("ptcp:6653:[::1]").ok(),
            Some(ListenTarget::Tcp("[::1]:6653".parse().expect("addr")))
        );
        assert_eq!(
            Target::parse("ssl:10.0.0.1:6653").ok(),
            Some(Target::Ssl(SocketAddr::from(([10, 0, 0, 1], 6653))))
        );
        assert_eq!(
            ListenTarget::parse("pssl:6653:127.0.0.1").ok(),
            Some(ListenTarget::Ssl(SocketAddr::from(([127, 0, 0, 1], 6653))))
        );
        assert_eq!(
            ListenTarget::parse("punix:/x").ok(),
            Some(ListenTarget::Unix("/x".into()))
        );
        for bad in [
            "tcp:1.2.3.4",
            "ssl:1.2.3.4",
            "pssl:x",
            "unix:",
            "ptcp:x",
            "ptcp:1:nope",
        ] {
            assert!(
                Target::parse(bad).is_err() || ListenTarget::parse(bad).is_err(),
                "{bad}"
            );
        }
    }
}

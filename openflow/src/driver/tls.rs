//! TLS for `ssl:` and `pssl:` targets: the handshake on either side, over a TCP stream, with
//! the rustls configs the caller built (its certificates, its CA, whether a client must
//! present a certificate, and which crypto provider). The driver only runs the handshake,
//! bounded by the session's handshake timeout, and keeps the peer's certificate; which name
//! a peer may claim is the caller's policy ([`super::SwitchHandle::peer_certificate`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{Error, PeerCertificate};

fn timed_out(what: &str, after: Duration) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("TLS {what} did not complete within {after:?}"),
    ))
}

/// The end-entity certificate of a completed handshake, if the peer sent one.
fn end_entity(
    certs: Option<&[tokio_rustls::rustls::pki_types::CertificateDer<'_>]>,
) -> Option<PeerCertificate> {
    certs.and_then(<[_]>::first).map(|c| c.clone().into_owned())
}

/// Runs the server side of the handshake on an accepted stream.
pub(crate) async fn accept(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    within: Duration,
) -> Result<
    (
        tokio_rustls::server::TlsStream<TcpStream>,
        Option<PeerCertificate>,
    ),
    Error,
> {
    let tls = tokio::time::timeout(within, TlsAcceptor::from(config).accept(stream))
        .await
        .map_err(|_| timed_out("accept", within))??;
    let peer = end_entity(tls.get_ref().1.peer_certificates());
    Ok((tls, peer))
}

/// Dials `addr` and runs the client side of the handshake. The server name rustls is given
/// is the address: as in Open vSwitch, a certificate is checked against the CA (and whatever
/// else the config's verifier checks), not against a host name.
pub(crate) async fn dial(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    within: Duration,
) -> Result<
    (
        tokio_rustls::client::TlsStream<TcpStream>,
        Option<PeerCertificate>,
    ),
    Error,
> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = tokio::time::timeout(within, TlsConnector::from(config).connect(name, stream))
        .await
        .map_err(|_| timed_out("connect", within))??;
    let peer = end_entity(tls.get_ref().1.peer_certificates());
    Ok((tls, peer))
}

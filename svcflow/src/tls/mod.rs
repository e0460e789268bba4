//! TLS with mutual authentication, and which peers may use plain TCP.
//!
//! [`Tls::load`] reads `--ssl-private-key`, `--ssl-certificate` and `--ssl-ca-cert` (PEM, as
//! `ovs-pki` writes them) and builds the rustls configs every connection uses, with the
//! `ring` provider:
//! - [`Tls::mutual`]: the OpenFlow and OVSDB manager listeners. A peer must present a
//!   certificate the CA signed, or the handshake fails.
//! - [`Tls::https`]: the REST, metrics and health listeners. A client may present none (REST
//!   has its own credentials).
//! - [`Tls::client`] and [`Tls::client_for`]: dialing. svcflow presents its certificate; the
//!   server's must be signed by the CA, and for a node's OVSDB server its common name must be
//!   the node's name. Host names are not checked, as in Open vSwitch (`ovs-pki` certificates
//!   name a node or a controller, not an address).
//!
//! A node's identity is its certificate's common name ([`name::common_name`]), as OVN's
//! chassis certificates: [`check_node`] is the rule every listener applies once the peer has
//! said which node it is. [`policy`] decides which plain-TCP endpoints may be used.
//!
//! Reading the files is the only I/O here; the TLS handshakes run in the transports
//! (`openflow::driver`, `ovsdb::client`, `coe::rest`, the metrics listener).

pub mod name;
pub mod policy;

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};

/// The three PEM files of `--ssl-private-key`, `--ssl-certificate` and `--ssl-ca-cert`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This daemon's private key.
    pub private_key: std::path::PathBuf,
    /// Its certificate (and any intermediates), presented to every peer.
    pub certificate: std::path::PathBuf,
    /// The CA (one or more certificates) that must have signed every peer's certificate.
    pub ca_cert: std::path::PathBuf,
}

/// Why the TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the material (a key that does not match the certificate, …).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Every certificate in a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The roots a CA file holds.
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| file_error(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// The TLS material and the configs built from it.
#[derive(Debug, Clone)]
pub struct Tls {
    /// Listeners whose peers must present a certificate the CA signed (OpenFlow, OVSDB).
    pub mutual: Arc<ServerConfig>,
    /// HTTPS listeners: a client certificate is optional.
    pub https: Arc<ServerConfig>,
    /// Dialing a peer whose certificate must be the CA's, whatever its name (the store's
    /// cluster members, a switch by address).
    pub client: Arc<ClientConfig>,
    provider: Arc<CryptoProvider>,
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Reads the three files and builds every config.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let provider = provider();
        let chain = certificates(&files.certificate)?;
        let key = PrivateKeyDer::from_pem_file(&files.private_key)
            .map_err(|e| file_error(&files.private_key, e))?;
        let roots = Arc::new(roots(&files.ca_cert)?);
        let config = |e: rustls::Error| TlsError::Config(e.to_string());
        let server = |optional: bool| -> Result<Arc<ServerConfig>, TlsError> {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
            let verifier = if optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            let mut server = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(config)?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(config)?;
            if optional {
                server.alpn_protocols = vec![b"http/1.1".to_vec()];
            }
            Ok(Arc::new(server))
        };
        let mut tls = Tls {
            mutual: server(false)?,
            https: server(true)?,
            client: Arc::new(
                ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(config)?
                    .with_root_certificates(RootCertStore::empty())
                    .with_no_client_auth(),
            ),
            provider,
            roots,
            chain,
            key: Arc::new(key),
        };
        tls.client = tls.dial(None)?;
        Ok(tls)
    }

    /// The config for dialing `node`'s OVSDB server: its certificate must be the CA's and
    /// carry the node's name as its common name. Checked on every (re)connection.
    pub fn client_for(&self, node: &str) -> Result<Arc<ClientConfig>, TlsError> {
        self.dial(Some(node.to_string()))
    }

    fn dial(&self, node: Option<String>) -> Result<Arc<ClientConfig>, TlsError> {
        let verifier = Arc::new(CaVerifier {
            roots: self.roots.clone(),
            algorithms: self.provider.signature_verification_algorithms,
            node,
        });
        let config = ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        Ok(Arc::new(config))
    }
}

/// A client config that trusts the CA in `ca_file` and presents no certificate: what the
/// CLI commands need to reach an HTTPS REST northbound.
pub fn ca_client(ca_file: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let verifier = Arc::new(CaVerifier {
        roots: Arc::new(roots(ca_file)?),
        algorithms: provider.signature_verification_algorithms,
        node: None,
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Why a peer may not be the node it says it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A TLS peer without a certificate (a listener that requires one never lets it through).
    #[error("it presented no certificate")]
    NoCertificate,
    /// The certificate's common name could not be read.
    #[error(transparent)]
    Name(#[from] name::NameError),
    /// The certificate names another node.
    #[error("its certificate is node {certificate:?}'s")]
    OtherNode {
        /// The common name in the certificate.
        certificate: String,
    },
}

/// Checks that a TLS peer's certificate names `node`: its subject's common name is the node's
/// name, as OVN's chassis certificates (`ovs-pki -u req+sign NODE switch`).
pub fn check_node(certificate: Option<&[u8]>, node: &str) -> Result<(), IdentityError> {
    let cn = name::common_name(certificate.ok_or(IdentityError::NoCertificate)?)?;
    if cn == node {
        Ok(())
    } else {
        Err(IdentityError::OtherNode { certificate: cn })
    }
}

/// Verifies a server's certificate against the CA (chain, validity, signatures), not its host
/// name; and, for a node, that its common name is the node's.
#[derive(Debug)]
struct CaVerifier {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
    node: Option<String>,
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if let Some(node) = &self.node {
            check_node(Some(end_entity), node).map_err(|e| {
                rustls::Error::General(format!("the server is not node {node:?}: {e}"))
            })?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

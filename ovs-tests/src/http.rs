//! A small in-process HTTP/1.1 client for the benches: `Content-Length` (and chunked) bodies,
//! keep-alive over one `std::net::TcpStream`, opened inside a network namespace, or HTTPS
//! over it with rustls ([`Http::with_tls`], for a daemon run with TLS). A `curl` process per
//! request would cost milliseconds; this costs a write and a read.
//!
//! svcflow's REST northbound listens on the loopback of a sandbox's or a lab's namespace, so
//! the socket is created on a short-lived thread that entered that namespace
//! ([`crate::kube::in_netns`], `setns`); a socket keeps its namespace whichever thread uses it
//! afterwards.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::kube::in_netns;

/// One reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// The `Warning` header, if any.
    pub warning: Option<String>,
}

/// A client of one server (`address`, e.g. `127.0.0.1:8181`) inside network namespace
/// `netns`, over one keep-alive connection, opened on the first request and again after the
/// server closes it.
#[derive(Debug)]
pub struct Http {
    netns: String,
    address: String,
    read_timeout: Duration,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    conn: Option<BufReader<Stream>>,
}

/// The connection: plain, or TLS over it.
#[derive(Debug)]
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

impl Http {
    /// A client of `address` inside `netns` (this process's own namespace if empty); nothing
    /// is connected yet. Replies may take up to
    /// 120 s (see [`Http::with_read_timeout`]).
    pub fn new(netns: &str, address: &str) -> Self {
        Self {
            netns: netns.to_string(),
            address: address.to_string(),
            read_timeout: Duration::from_secs(120),
            tls: None,
            conn: None,
        }
    }

    /// The same over HTTPS: the server's certificate must name `server_name` and be signed
    /// by the CA in PEM file `ca`. No client certificate is presented.
    pub fn with_tls(mut self, ca: &str, server_name: &str) -> std::io::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(format!("{ca}: {e}")))? {
            roots
                .add(cert.map_err(|e| bad(format!("{ca}: {e}")))?)
                .map_err(|e| bad(format!("{ca}: {e}")))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| bad(format!("{server_name}: {e}")))?;
        self.tls = Some((Arc::new(config), name));
        Ok(self)
    }

    /// The same, waiting at most `timeout` for a reply.
    pub fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    fn connect(&self) -> std::io::Result<BufReader<Stream>> {
        let address = self.address.clone();
        let stream = if self.netns.is_empty() {
            TcpStream::connect(address)?
        } else {
            in_netns(&self.netns, move || TcpStream::connect(address))?
        };
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.read_timeout))?;
        let stream = match &self.tls {
            None => Stream::Plain(stream),
            Some((config, name)) => {
                let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| bad(e.to_string()))?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, stream)))
            }
        };
        Ok(BufReader::with_capacity(64 * 1024, stream))
    }

    /// Sends one request (`path` from the root, e.g. `/restconf/config/…`) with a JSON body
    /// unless it is empty; on a reused connection that the server closed before any reply
    /// byte, reconnects once and sends it again.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> std::io::Result<Reply> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.address);
        if !body.is_empty() || method != "GET" {
            let _ = write!(
                head,
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            );
        }
        head.push_str("\r\n");
        let reused = self.conn.is_some();
        match self.exchange(head.as_bytes(), body) {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) if reused => {
                self.conn = None;
                self.exchange(head.as_bytes(), body)?.ok_or_else(closed)
            }
            Ok(None) => Err(closed()),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    /// `Ok(None)`: the connection was closed before the status line.
    fn exchange(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<Option<Reply>> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self.conn.insert(self.connect()?),
        };
        let sent = if body.len() <= 64 * 1024 {
            let mut all = Vec::with_capacity(head.len() + body.len());
            all.extend_from_slice(head);
            all.extend_from_slice(body);
            conn.get_mut().write_all(&all)
        } else {
            conn.get_mut()
                .write_all(head)
                .and_then(|()| conn.get_mut().write_all(body))
        }
        .and_then(|()| conn.get_mut().flush());
        if sent.is_err() {
            self.conn = None;
            return Ok(None);
        }
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            self.conn = None;
            return Ok(None);
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        let mut warning = None;
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(bad("the connection closed inside the headers".into()));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                return Err(bad(format!("bad header {header:?}")));
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => {
                    length = Some(value.parse::<usize>().map_err(|e| bad(e.to_string()))?);
                }
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                "warning" => warning = Some(value.to_string()),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|e| bad(format!("bad chunk size {line:?}: {e}")))?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        line.clear();
                        if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                conn.read_exact(&mut body[start..])?;
                line.clear();
                conn.read_line(&mut line)?;
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        } else if status != 204 && status != 304 && !(100..200).contains(&status) {
            conn.read_to_end(&mut body)?;
            close = true;
        }
        if close {
            self.conn = None;
        }
        Ok(Some(Reply {
            status,
            body,
            warning,
        }))
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the server closed the connection without a reply",
    )
}

fn bad(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

//! A tiny server and client for traffic tests, run inside sandbox hosts.
//!
//! ```text
//! svcflow-probe serve NAME [tcp:PORT | udp:PORT]...
//!     Answers every TCP connection with a minimal HTTP/1.0 response whose body is NAME,
//!     and every UDP datagram with NAME. Prints `ready` once all sockets are bound.
//! svcflow-probe connect tcp|udp IP:PORT [--count N] [--timeout-ms T] [--src-port P] [--gap-ms G]
//!                       [--peer]
//!     Makes N attempts and prints one line per attempt: `ok NAME` (the backend that
//!     answered), `err refused`, `err timeout` or `err OTHER`. With `--peer` the client asks
//!     the server who it saw (TCP `GET /peer`, UDP datagram `peer`), and the server answers
//!     `NAME@IP` with the source address of the connection as it arrived: `ok NAME@IP`.
//! svcflow-probe loop tcp|udp IP:PORT [--timeout-ms T] [--src-port P] [--gap-ms G] [--peer]
//!     Like `connect`, but makes attempts until its stdin closes, and each line also gives
//!     the attempt's duration in milliseconds: `ok NAME MS` or `err WHY MS`.
//! svcflow-probe hold IP:PORT [--timeout-ms T] [--gap-ms G]
//!     Opens one TCP connection and keeps it: the server answers `HOLD` with its name and
//!     then echoes every line. Every G ms (default 100) it sends `ping N` and waits up to T ms
//!     for the echo, printing `ok NAME MS` per exchange (the first is the greeting), until its
//!     stdin closes (exit 0). The first failure prints `err WHY MS` and exits 1: a broken
//!     connection stays broken.
//! ```
//! The TCP side speaks just enough HTTP that `curl` can be a client as well.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("connect") => connect(&args[1..]),
        Some("loop") => run_loop(&args[1..]),
        Some("hold") => hold(&args[1..]),
        _ => Err(USAGE.to_string()),
    };
    if let Err(message) = result {
        eprintln!("svcflow-probe: {message}");
        std::process::exit(2);
    }
}

const USAGE: &str = "usage: svcflow-probe serve NAME [tcp:PORT|udp:PORT]... | \
                     svcflow-probe connect tcp|udp IP:PORT [--count N] [--timeout-ms T] \
                     [--src-port P] [--gap-ms G] [--peer] | \
                     svcflow-probe loop tcp|udp IP:PORT [--timeout-ms T] [--src-port P] \
                     [--gap-ms G] [--peer] | svcflow-probe hold IP:PORT [--timeout-ms T] [--gap-ms G]";

fn serve(args: &[String]) -> Result<(), String> {
    let (name, listens) = args.split_first().ok_or(USAGE)?;
    if listens.is_empty() {
        return Err(USAGE.to_string());
    }
    let mut threads = Vec::new();
    for listen in listens {
        let (proto, port) = listen.split_once(':').ok_or(USAGE)?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("bad port in `{listen}`"))?;
        let name = name.clone();
        match proto {
            "tcp" => {
                let listener = bind_any(port, TcpListener::bind)
                    .map_err(|e| format!("bind tcp:{port}: {e}"))?;
                threads.push(std::thread::spawn(move || serve_tcp(listener, &name)));
            }
            "udp" => {
                let socket =
                    bind_any(port, UdpSocket::bind).map_err(|e| format!("bind udp:{port}: {e}"))?;
                threads.push(std::thread::spawn(move || serve_udp(socket, &name)));
            }
            _ => return Err(format!("unknown protocol in `{listen}`")),
        }
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    for thread in threads {
        let _ = thread.join();
    }
    Ok(())
}

/// Binds `port` on `[::]`, which on Linux also takes IPv4 (as IPv4-mapped addresses), so one
/// server answers both families; in a namespace without IPv6 (`EAFNOSUPPORT`, or IPv6
/// disabled: `EADDRNOTAVAIL`), on `0.0.0.0`. Any other error is the error.
fn bind_any<T>(port: u16, bind: impl Fn(SocketAddr) -> std::io::Result<T>) -> std::io::Result<T> {
    match bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))) {
        Err(e) if matches!(e.raw_os_error(), Some(97 | 99)) => {
            bind(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port)))
        }
        other => other,
    }
}

/// A peer's address as the client knows it: an IPv4 client of a dual-stack socket is seen as
/// an IPv4-mapped IPv6 address, printed here as the IPv4 address it is.
fn peer_ip(peer: SocketAddr) -> std::net::IpAddr {
    match peer.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    }
}

fn serve_tcp(listener: TcpListener, name: &str) {
    for stream in listener.incoming().flatten() {
        let name = name.to_string();
        std::thread::spawn(move || answer_tcp(stream, &name));
    }
}

fn answer_tcp(mut stream: TcpStream, name: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    // Read the request head, if the client sends one, before answering.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    if head.starts_with(HOLD) {
        hold_echo(stream, name);
        return;
    }
    // `--peer` clients ask who the server saw: `NAME@IP`, the connection's source address.
    let body = match stream.peer_addr() {
        Ok(peer) if head.starts_with(PEER_REQUEST) => format!("{name}@{}\n", peer_ip(peer)),
        _ => format!("{name}\n"),
    };
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// The request line of a `--peer` client, which asks the server for the address it saw.
const PEER_REQUEST: &[u8] = b"GET /peer ";

/// The request head that asks for a long-lived echo connection instead of an HTTP answer.
const HOLD: &[u8] = b"HOLD\r\n\r\n";

/// A long-lived connection: greet with the server's name, then echo every line prefixed with
/// it, until the client closes.
fn hold_echo(stream: TcpStream, name: &str) {
    let _ = stream.set_read_timeout(None);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    if writer.write_all(format!("{name}\n").as_bytes()).is_err() {
        return;
    }
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        if writer
            .write_all(format!("{name} {line}\n").as_bytes())
            .is_err()
        {
            return;
        }
    }
}

fn serve_udp(socket: UdpSocket, name: &str) {
    let mut buf = [0u8; 2048];
    while let Ok((n, peer)) = socket.recv_from(&mut buf) {
        let answer = if &buf[..n] == PEER_DATAGRAM {
            format!("{name}@{}", peer_ip(peer))
        } else {
            name.to_string()
        };
        let _ = socket.send_to(answer.as_bytes(), peer);
    }
}

/// The datagram of a `--peer` client.
const PEER_DATAGRAM: &[u8] = b"peer";

struct ConnectOptions {
    udp: bool,
    target: SocketAddr,
    count: u32,
    timeout: Duration,
    src_port: u16,
    gap: Duration,
    /// Ask the server for the source address it saw.
    peer: bool,
}

fn parse_connect(args: &[String]) -> Result<ConnectOptions, String> {
    let [proto, target, rest @ ..] = args else {
        return Err(USAGE.to_string());
    };
    let udp = match proto.as_str() {
        "tcp" => false,
        "udp" => true,
        other => return Err(format!("unknown protocol `{other}`")),
    };
    let target: SocketAddr = target
        .parse()
        .map_err(|_| format!("bad address `{target}`"))?;
    let mut options = ConnectOptions {
        udp,
        target,
        count: 1,
        timeout: Duration::from_millis(2000),
        src_port: 0,
        gap: Duration::ZERO,
        peer: false,
    };
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        if flag == "--peer" {
            options.peer = true;
            continue;
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: u64 = value.parse().map_err(|_| format!("bad value for {flag}"))?;
        match flag.as_str() {
            "--count" => options.count = u32::try_from(number).map_err(|_| "count too large")?,
            "--timeout-ms" => options.timeout = Duration::from_millis(number),
            "--src-port" => options.src_port = u16::try_from(number).map_err(|_| "bad port")?,
            "--gap-ms" => options.gap = Duration::from_millis(number),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(options)
}

fn connect(args: &[String]) -> Result<(), String> {
    let options = parse_connect(args)?;
    attempts(&options, None)
}

/// A flag that becomes true once stdin reaches its end (or fails): the signal to stop.
fn stdin_closed() -> Arc<AtomicBool> {
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().lock().read_to_end(&mut sink);
        flag.store(true, Ordering::SeqCst);
    });
    closed
}

fn run_loop(args: &[String]) -> Result<(), String> {
    let options = parse_connect(args)?;
    let stop = stdin_closed();
    attempts(&options, Some(&stop))
}

fn millis(d: Duration) -> u128 {
    d.as_millis()
}

/// Makes `options.count` attempts, or with `stop`, attempts until it is set, printing a line
/// for each (with its duration when looping).
fn attempts(options: &ConnectOptions, stop: Option<&AtomicBool>) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    // One UDP socket for all attempts keeps the 5-tuple fixed, as a long-lived client would.
    let udp_socket = if options.udp {
        let local: std::net::IpAddr = if options.target.is_ipv6() {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        };
        let socket = UdpSocket::bind((local, options.src_port)).map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(options.timeout))
            .map_err(|e| e.to_string())?;
        // A connected socket hears ICMP port unreachable as ECONNREFUSED.
        socket.connect(options.target).map_err(|e| e.to_string())?;
        Some(socket)
    } else {
        None
    };
    let mut attempt = 0u64;
    loop {
        match stop {
            Some(stop) if stop.load(Ordering::SeqCst) => break,
            Some(_) => {}
            None if attempt >= u64::from(options.count) => break,
            None => {}
        }
        if attempt > 0 && !options.gap.is_zero() {
            std::thread::sleep(options.gap);
        }
        attempt += 1;
        let started = Instant::now();
        let outcome = match &udp_socket {
            Some(socket) => udp_attempt(socket, options.peer),
            None => tcp_attempt(options.target, options.timeout, options.peer),
        };
        let mut line = match outcome {
            Ok(name) => format!("ok {name}"),
            Err(e) => format!("err {}", describe(&e)),
        };
        if stop.is_some() {
            line = format!("{line} {}", millis(started.elapsed()));
        }
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn hold(args: &[String]) -> Result<(), String> {
    let [target, rest @ ..] = args else {
        return Err(USAGE.to_string());
    };
    let mut with_proto = vec!["tcp".to_string(), target.clone()];
    with_proto.extend_from_slice(rest);
    let mut options = parse_connect(&with_proto)?;
    if !rest.iter().any(|a| a == "--gap-ms") {
        options.gap = Duration::from_millis(100);
    }
    let stop = stdin_closed();
    let mut out = std::io::stdout().lock();
    let mut report = |line: String| -> Result<(), String> {
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())
    };
    let started = Instant::now();
    let opened = (|| -> std::io::Result<(TcpStream, BufReader<TcpStream>, String)> {
        let mut stream = TcpStream::connect_timeout(&options.target, options.timeout)?;
        stream.set_read_timeout(Some(options.timeout))?;
        stream.write_all(HOLD)?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let name = read_line(&mut reader)?;
        Ok((stream, reader, name))
    })();
    let (mut stream, mut reader, name) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            report(format!(
                "err {} {}",
                describe(&e),
                millis(started.elapsed())
            ))?;
            std::process::exit(1);
        }
    };
    report(format!("ok {name} {}", millis(started.elapsed())))?;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(options.gap);
        n += 1;
        let started = Instant::now();
        let exchange = (|| -> std::io::Result<()> {
            stream.write_all(format!("ping {n}\n").as_bytes())?;
            let echo = read_line(&mut reader)?;
            if echo == format!("{name} ping {n}") {
                Ok(())
            } else {
                Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("unexpected echo `{echo}`"),
                ))
            }
        })();
        match exchange {
            Ok(()) => report(format!("ok {name} {}", millis(started.elapsed())))?,
            Err(e) => {
                report(format!(
                    "err {} {}",
                    describe(&e),
                    millis(started.elapsed())
                ))?;
                std::process::exit(1);
            }
        }
    }
    Ok(())
}

/// One line, without its end; the end of the stream is an error.
fn read_line(reader: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(line.trim_end().to_string())
}

fn tcp_attempt(target: SocketAddr, timeout: Duration, peer: bool) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&target, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    let request: &[u8] = if peer {
        b"GET /peer HTTP/1.0\r\n\r\n"
    } else {
        b"GET / HTTP/1.0\r\n\r\n"
    };
    stream.write_all(request)?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.trim())
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "no HTTP body"))?;
    Ok(body.to_string())
}

fn udp_attempt(socket: &UdpSocket, peer: bool) -> std::io::Result<String> {
    socket.send(if peer { PEER_DATAGRAM } else { b"probe" })?;
    let mut buf = [0u8; 2048];
    let n = socket.recv(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".to_string(),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timeout".to_string(),
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => "unreachable".to_string(),
        ErrorKind::ConnectionReset => "reset".to_string(),
        ErrorKind::UnexpectedEof => "closed".to_string(),
        _ => e.to_string().replace(' ', "_"),
    }
}

//! `svcflow get services [NAME]` and `svcflow get nodes [NAME]`: the operational views over
//! REST, as a table (like `kubectl get`) or as JSON. A minimal HTTP/1.1 client: one request,
//! `Connection: close`, over TLS for `https://` URLs (rustls, trusting the CA of `--ca-cert`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

const OPERATIONAL: &str = "/restconf/operational/service:service-information";
const NODES: &str = "/restconf/operational/svcflow:nodes";

/// A `svcflow get` command: the REST URL, the `Authorization` header, one item's name, and
/// whether to print JSON.
pub type Getter = fn(&str, Option<&str>, Option<&str>, bool) -> Result<String, String>;

/// The nodes (one, when `name` is given) as a table, or as the JSON the northbound answered
/// with `json`.
pub fn nodes(
    rest: &str,
    auth: Option<&str>,
    name: Option<&str>,
    json: bool,
) -> Result<String, String> {
    let path = match name {
        Some(n) => format!("{NODES}/{}", path_segment(n)),
        None => NODES.to_string(),
    };
    let body = get(rest, &path, auth)?;
    let value: Value =
        serde_json::from_slice(&body).map_err(|e| format!("{rest}{path}: not JSON: {e}"))?;
    let nodes = value["svcflow:nodes"]["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if json {
        return serde_json::to_string_pretty(&nodes)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string());
    }
    Ok(nodes_table(&nodes))
}

/// `s` percent-encoded for a URL path segment (all but unreserved characters).
fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// How many of a node's conflicts the table lists; `-o json` has them all.
const CONFLICTS_LISTED: usize = 20;

/// One row per node, then a line per node another replica masters, with where to ask, then
/// the conflicts of the nodes this daemon writes.
fn nodes_table(nodes: &[Value]) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let count = |v: &Value| v.as_u64().map_or("-".to_string(), |n| n.to_string());
    let mut rows = vec![
        [
            "NAME",
            "SWITCH",
            "ROLE",
            "FLOWS",
            "GROUPS",
            "LAST SYNC",
            "REVISION",
            "TOOK",
            "CONFLICTS",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut elsewhere = Vec::new();
    let mut conflicts = Vec::new();
    for n in nodes {
        let switch = match n["connection"].as_u64() {
            Some(c) if n["switch-connected"] == true => format!("connected ({c})"),
            _ => "not connected".to_string(),
        };
        let mut role = text(&n["role"]);
        if n["writes"] == true && n["role"] != "master" {
            role.push_str(" (sole controller)");
        }
        let last = &n["last-sync"];
        rows.push(vec![
            text(&n["node"]),
            switch,
            role,
            count(&n["flows"]),
            count(&n["groups"]),
            last["time"].as_str().unwrap_or("never").to_string(),
            count(&last["revision"]),
            last["duration-ms"]
                .as_f64()
                .map_or("-".into(), |ms| format!("{ms:.1}ms")),
            n["conflicts"]
                .as_array()
                .map_or("-".into(), |c| c.len().to_string()),
        ]);
        let listed = n["conflicts"].as_array().map_or(&[][..], Vec::as_slice);
        for c in listed.iter().take(CONFLICTS_LISTED) {
            conflicts.push(format!("{}: {}\n", text(&n["node"]), text(c)));
        }
        if listed.len() > CONFLICTS_LISTED {
            conflicts.push(format!(
                "{}: … and {} more (`svcflow get nodes {} -o json` lists them all)\n",
                text(&n["node"]),
                listed.len() - CONFLICTS_LISTED,
                text(&n["node"])
            ));
        }
        if let (Some(master), Some(rest)) = (n["master"].as_str(), n["rest"].as_str()) {
            elsewhere.push(format!(
                "node {} is mastered by another replica ({master}; ask `svcflow get nodes --rest {rest}`)\n",
                text(&n["node"])
            ));
        }
    }
    let mut out = align(&rows);
    out.extend(elsewhere);
    if !conflicts.is_empty() {
        out.push_str("conflicts (also logged by each sync that renders them):\n");
        out.extend(conflicts);
    }
    out
}

/// The services (one, when `name` is `NAMESPACE/NAME` or a uid) as a table, or as the JSON
/// the northbound answered with `json`.
pub fn services(
    rest: &str,
    auth: Option<&str>,
    name: Option<&str>,
    json: bool,
) -> Result<String, String> {
    let body = get(rest, OPERATIONAL, auth)?;
    let value: Value =
        serde_json::from_slice(&body).map_err(|e| format!("{rest}{OPERATIONAL}: not JSON: {e}"))?;
    let all = value["service:service-information"]["services"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let chosen: Vec<Value> = all
        .into_iter()
        .filter(|s| match name {
            None => true,
            Some(n) => {
                let full = format!(
                    "{}/{}",
                    s["network-NS"].as_str().unwrap_or(""),
                    s["name"].as_str().unwrap_or("")
                );
                n == full || Some(n) == s["uid"].as_str()
            }
        })
        .collect();
    if let Some(n) = name
        && chosen.is_empty()
    {
        return Err(format!("no service {n} in the operational view"));
    }
    let unreported = unreported(&value["service:service-information"]["unreported-nodes"]);
    if json {
        // Standard output stays the services' JSON; what it lacks is said on standard error.
        for line in &unreported {
            eprintln!("svcflow get: {line}");
        }
        return serde_json::to_string_pretty(&chosen)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string());
    }
    let mut out = table(&chosen);
    for line in unreported {
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

/// A line per node the view has no state for (`unreported-nodes`): why, and where to ask.
fn unreported(nodes: &Value) -> Vec<String> {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    nodes
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let mut line = format!(
                "node {} is not in this view: {}",
                text(&n["node"]),
                text(&n["reason"])
            );
            if let (Some(master), Some(rest)) = (n["master"].as_str(), n["rest"].as_str()) {
                line.push_str(&format!(
                    " ({master}; ask `svcflow get services --rest {rest}`)"
                ));
            }
            line
        })
        .collect()
}

/// One row per service and node: its group, endpoints (with bucket packet counts) and
/// counters.
fn table(services: &[Value]) -> String {
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "NODE",
            "GROUP",
            "ENDPOINTS (PACKETS)",
            "PACKETS",
            "BYTES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for s in services {
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let groups = s["groups"].as_array().cloned().unwrap_or_default();
        if groups.is_empty() {
            rows.push(vec![
                text(&s["network-NS"]),
                text(&s["name"]),
                "-".into(),
                "-".into(),
                "(none: refused)".into(),
                "0".into(),
                "0".into(),
            ]);
        }
        for g in groups {
            let endpoints: Vec<String> = g["buckets"]
                .as_array()
                .map(|b| {
                    b.iter()
                        .map(|b| {
                            format!(
                                "{} ({})",
                                b["endpoint"].as_str().unwrap_or("?"),
                                b["packet-count"].as_u64().unwrap_or(0)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            rows.push(vec![
                text(&s["network-NS"]),
                text(&s["name"]),
                text(&g["node"]),
                g["group-id"].as_u64().map_or("-".into(), |g| g.to_string()),
                endpoints.join(", "),
                g["packet-count"].as_u64().unwrap_or(0).to_string(),
                g["byte-count"].as_u64().unwrap_or(0).to_string(),
            ]);
        }
    }
    align(&rows)
}

/// The rows as columns three spaces apart, each as wide as its widest cell.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |cell| cell.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// The TLS client for `https://` URLs: set once, from `--ca-cert`, before any request.
static HTTPS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Uses `config` (see [`crate::tls::ca_client`]) for `https://` URLs.
pub(crate) fn trust(config: Arc<rustls::ClientConfig>) {
    let _ = HTTPS.set(config);
}

/// A byte stream to the daemon: TCP, or TLS over TCP.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// GET `path` from `rest` (`http://HOST:PORT` or `https://HOST:PORT`); the body of a 200, else
/// the answer's error.
pub(crate) fn get(rest: &str, path: &str, auth: Option<&str>) -> Result<Vec<u8>, String> {
    call(rest, "GET", path, auth, None)
}

/// One request (a JSON body for POST), and the body of its 200 answer, else the RESTCONF
/// error's message.
pub(crate) fn call(
    rest: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    let (host, tls) = match (rest.strip_prefix("http://"), rest.strip_prefix("https://")) {
        (Some(host), _) => (host, false),
        (None, Some(host)) => (host, true),
        (None, None) => {
            return Err(format!(
                "{rest}: expected http://HOST:PORT or https://HOST:PORT"
            ));
        }
    };
    let host = host.trim_end_matches('/');
    let tcp = TcpStream::connect(host).map_err(|e| format!("connecting to {host}: {e}"))?;
    let timeout = Some(Duration::from_secs(30));
    let _ = tcp.set_read_timeout(timeout);
    let mut stream: Box<dyn Stream> = if tls {
        let config = HTTPS
            .get()
            .ok_or_else(|| format!("{rest}: https needs --ca-cert (or SVCFLOW_CA_CERT)"))?;
        let ip = tcp.peer_addr().map_err(|e| format!("{host}: {e}"))?.ip();
        let name = rustls::pki_types::ServerName::IpAddress(ip.into());
        let conn = rustls::ClientConnection::new(config.clone(), name)
            .map_err(|e| format!("{host}: TLS: {e}"))?;
        Box::new(rustls::StreamOwned::new(conn, tcp))
    } else {
        Box::new(tcp)
    };
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let content = body.map_or_else(String::new, |b| {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        )
    });
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}{content}Accept: application/json\r\nConnection: close\r\n\r\n"
    )
    .and_then(|()| stream.write_all(body.unwrap_or_default()))
    .map_err(|e| format!("{host}: {e}"))?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        // A TLS peer that closes without close_notify after a complete answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(format!("{host}: {e}")),
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{host}: not an HTTP answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        let why = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| {
                v["errors"]["error"][0]["error-message"]
                    .as_str()
                    .map(String::from)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        return Err(format!("{rest}{path}: {status}: {why}"));
    }
    Ok(body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_a_row_per_service_and_node() {
        let services: Vec<Value> = serde_json::from_str(
            r#"[{"uid":"s1","network-NS":"default","name":"web","packet-count":5,"byte-count":300,
               "groups":[{"node":"n1","group-id":7,"buckets":[{"endpoint":"10.244.0.11:8080",
               "packet-count":3},{"endpoint":"10.244.0.12:8080","packet-count":2}],
               "packet-count":5,"byte-count":300}],"flows":[]},
              {"uid":"s2","network-NS":"default","name":"none","groups":[],"flows":[]}]"#,
        )
        .unwrap();
        let t = table(&services);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   NAME"), "{t}");
        assert!(
            lines[1].contains("10.244.0.11:8080 (3), 10.244.0.12:8080 (2)"),
            "{t}"
        );
        assert!(
            lines[1].contains("  7  ") || lines[1].contains(" 7 "),
            "{t}"
        );
        assert!(lines[2].contains("(none: refused)"), "{t}");
    }

    #[test]
    fn nodes_missing_from_the_view_are_named_with_where_to_ask() {
        let lines = unreported(&serde_json::json!([
            {"node": "n2", "reason": "mastered by another replica",
             "master": "tcp:10.0.0.2:6653", "rest": "http://10.0.0.2:8181"},
            {"node": "n3", "reason": "switch not connected or not synced yet"},
        ]));
        assert_eq!(
            lines,
            [
                "node n2 is not in this view: mastered by another replica (tcp:10.0.0.2:6653; \
                 ask `svcflow get services --rest http://10.0.0.2:8181`)",
                "node n3 is not in this view: switch not connected or not synced yet",
            ]
        );
        assert!(unreported(&Value::Null).is_empty());
    }

    #[test]
    fn a_nodes_table_has_a_row_per_node_and_says_who_masters_the_others() {
        let nodes: Vec<Value> = serde_json::from_str(
            r#"[{"node":"n1","switch-connected":true,"connection":3,"role":"equal",
               "writes":true,"flows":120,"groups":2,"last-sync":{"time":"2026-11-24T09:41:00.120Z",
               "revision":5,"result":"ok","duration-ms":12.345},"syncs":[],
               "conflicts":["default/web: endpoint fd00::5 is not used: the service has no IPv6 address"]},
              {"node":"n2","switch-connected":false,"writes":false,"master":"tcp:10.0.0.2:6653",
               "rest":"http://10.0.0.2:8181","syncs":[]}]"#,
        )
        .unwrap();
        let t = nodes_table(&nodes);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "NAME   SWITCH          ROLE                      FLOWS   GROUPS   LAST SYNC                  REVISION   TOOK     CONFLICTS"
        );
        assert_eq!(
            lines[1],
            "n1     connected (3)   equal (sole controller)   120     2        2026-11-24T09:41:00.120Z   5          12.3ms   1"
        );
        assert_eq!(
            lines[2],
            "n2     not connected   -                         -       -        never                      -          -        -"
        );
        assert_eq!(
            lines[3],
            "node n2 is mastered by another replica (tcp:10.0.0.2:6653; ask `svcflow get nodes \
             --rest http://10.0.0.2:8181`)"
        );
        assert_eq!(
            lines[4..],
            [
                "conflicts (also logged by each sync that renders them):",
                "n1: default/web: endpoint fd00::5 is not used: the service has no IPv6 address"
            ]
        );
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn a_nodes_table_lists_a_bounded_number_of_conflicts() {
        let many: Vec<String> = (0..23).map(|i| format!("conflict {i}")).collect();
        let nodes = vec![serde_json::json!({"node": "n1", "writes": true, "conflicts": many})];
        let t = nodes_table(&nodes);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].ends_with(" 23"), "{t}");
        assert_eq!(lines[3], "n1: conflict 0", "{t}");
        assert_eq!(lines[22], "n1: conflict 19", "{t}");
        assert_eq!(
            lines[23], "n1: … and 3 more (`svcflow get nodes n1 -o json` lists them all)",
            "{t}"
        );
        assert_eq!(lines.len(), 24, "{t}");
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), b"abcde");
    }
}

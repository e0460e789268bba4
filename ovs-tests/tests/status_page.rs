//! The operational nodes view, `svcflow get nodes`, and the status page at `/`, from a real
//! `svcflow run` syncing a real switch; the page is loaded by headless Chromium
//! (`--dump-dom`), which fails the test, never skips it, when it is not installed.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::{Duration, Instant};

use ovs_tests::Sandbox;
use ovs_tests::svcflow::fixture::{put_web, put_web_endpoints, web_pods};
use ovs_tests::svcflow::{Daemon, rest};
use serde_json::Value;

const NODES: &str = "http://127.0.0.1:8181/restconf/operational/svcflow:nodes";

fn wait_until(what: &str, daemon: &Daemon, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The Chromium to run (`CHROMIUM`, else `chromium` on the path); the test fails here, before
/// anything starts, when it cannot run.
fn chromium_binary() -> String {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    if let Err(e) = std::process::Command::new(&chromium)
        .arg("--version")
        .output()
    {
        panic!(
            "`{chromium}` cannot run ({e}): the status page test needs headless Chromium; \
             install it with scripts/install-deps.sh (Debian package `chromium`) or set CHROMIUM"
        );
    }
    chromium
}

/// Headless Chromium, in the node's namespace with a fresh profile, run with `what` (e.g.
/// `--dump-dom`) on `url`; its standard output.
fn chromium(sb: &Sandbox, chromium: &str, what: &[&str], url: &str) -> String {
    let profile = sb.dir().join(format!(
        "chromium-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let profile = format!("--user-data-dir={}", profile.display());
    let mut argv = vec![
        "timeout",
        "90",
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        &profile,
    ];
    argv.extend_from_slice(what);
    argv.push(url);
    sb.node(&argv)
        .unwrap_or_else(|e| panic!("chromium {what:?} {url}: {e}"))
}

/// The opening tag of the element with this attribute, as Chromium serialized it.
fn tag_with<'a>(dom: &'a str, attribute: &str) -> &'a str {
    let at = dom
        .find(attribute)
        .unwrap_or_else(|| panic!("no element with {attribute} in the DOM:\n{dom}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

/// The text of the first `<td class="CLASS">` after `from` in `dom`.
fn cell<'a>(dom: &'a str, from: usize, class: &str) -> &'a str {
    let open = format!("<td class=\"{class}\">");
    let at = from + dom[from..].find(&open).unwrap() + open.len();
    &dom[at..at + dom[at..].find("</td>").unwrap()]
}

#[test]
fn the_nodes_view_get_nodes_and_the_status_page_show_the_real_switch() {
    let browser = chromium_binary();
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = Daemon::start(&sb, 1, "info").unwrap();
    wait_until("br-int", &daemon, || sb.dump_flows("br-int").is_ok());
    let (client, _servers) = web_pods(&mut sb);
    put_web(&|path, body| {
        rest(&sb, "PUT", path, body).unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    });
    wait_until("the service synced", &daemon, || {
        sb.dump_flows("br-int")
            .is_ok_and(|flows| flows.contains("nw_dst=10.96.0.10"))
    });
    // The nodes view: n1's switch connected, this daemon its sole (EQUAL) controller and
    // writer, the flows of its last sync, and that sync among the last few.
    let mut view = Value::Null;
    wait_until("n1 synced to the last write", &daemon, || {
        view = serde_json::from_str(&sb.node(&["curl", "-sS", "-f", NODES]).unwrap()).unwrap();
        // The fixture made 6 writes: the node, 3 pods, the service, its endpoints.
        view["svcflow:nodes"]["nodes"][0]["last-sync"]["revision"]
            .as_u64()
            .is_some_and(|r| r >= 6)
    });
    // Traffic through the service, so that its buckets count packets.
    let attempts = client.connect("tcp", "10.96.0.10:80", 20, &[]).unwrap();
    assert!(attempts.iter().all(Result::is_ok), "{attempts:?}");

    let n1 = &view["svcflow:nodes"]["nodes"][0];
    assert_eq!(n1["node"], "n1", "{view}");
    assert_eq!(n1["switch-connected"], true, "{view}");
    assert!(n1["connection"].as_u64().is_some(), "{view}");
    // svcflow without replicas never asks for a role: the switch says EQUAL.
    assert_eq!(n1["role"], "equal", "{view}");
    assert_eq!(n1["writes"], true, "{view}");
    let flows = n1["flows"].as_u64().unwrap();
    assert!(flows > 0, "{view}");
    let installed = sb.flow_stats("br-int").unwrap().len() as u64;
    assert_eq!(
        flows, installed,
        "desired flows against the switch's\n{view}"
    );
    assert!(n1["groups"].as_u64().unwrap() >= 1, "{view}");
    let last = &n1["last-sync"];
    assert_eq!(last["result"], "ok");
    assert!(last["duration-ms"].as_f64().unwrap() > 0.0, "{view}");
    assert!(last["time"].as_str().unwrap().ends_with('Z'), "{view}");
    let syncs = n1["syncs"].as_array().unwrap();
    assert!(!syncs.is_empty() && syncs.len() <= 10, "{view}");
    assert_eq!(syncs[0], *last, "the newest sync is the last success");
    assert_eq!(n1["conflicts"], serde_json::json!([]), "{view}");
    let conflicts_metric = || {
        let scrape = sb
            .node(&["curl", "-sS", "-f", "http://127.0.0.1:10249/metrics"])
            .unwrap();
        scrape
            .lines()
            .find_map(|l| l.strip_prefix("svcflow_conflicts{node=\"n1\"} "))
            .map(str::to_string)
    };
    assert_eq!(conflicts_metric().as_deref(), Some("0"));
    assert!(
        syncs.iter().any(|s| s["flows-added"].as_u64() > Some(0)),
        "a sync added flows: {view}"
    );
    let unknown = format!("{NODES}/nope");
    let status = sb.node(&[
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &unknown,
    ]);
    assert_eq!(status.unwrap(), "404");

    // A conflict: an IPv6 endpoint of web, which has only an IPv4 cluster IP. The nodes view
    // names it (as the sync logs it), and keeps naming it after later syncs.
    put_web_endpoints(&sb, &["10.244.0.11", "10.244.0.12", "fd00::77"]);
    let conflict = "default/web: endpoint fd00::77 is not used: the service has no IPv6 address";
    wait_until("the nodes view to name the conflict", &daemon, || {
        view = serde_json::from_str(&sb.node(&["curl", "-sS", "-f", NODES]).unwrap()).unwrap();
        view["svcflow:nodes"]["nodes"][0]["conflicts"] == serde_json::json!([conflict])
    });
    // And `svcflow_conflicts` counts it, kept as the shards change.
    assert_eq!(conflicts_metric().as_deref(), Some("1"));

    // `svcflow get nodes`: the table and the JSON.
    let bin = ovs_tests::svcflow::svcflow_binary().unwrap();
    let bin = bin.to_string_lossy().to_string();
    let table = sb.node(&[&bin, "get", "nodes"]).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAME   SWITCH"), "{table}");
    assert!(
        lines[1].starts_with("n1 ")
            && lines[1].contains("connected (")
            && lines[1].contains(" equal (sole controller) "),
        "{table}"
    );
    assert!(lines[1].contains(&format!(" {flows} ")), "{table}");
    assert!(lines[1].ends_with(" 1"), "one conflict: {table}");
    assert_eq!(
        lines[2..],
        [
            "conflicts (also logged by each sync that renders them):".to_string(),
            format!("n1: {conflict}")
        ],
        "{table}"
    );
    let json: Value = serde_json::from_str(
        &sb.node(&[&bin, "get", "nodes", "n1", "-o", "json"])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json[0]["node"], "n1", "{json}");
    let err = sb
        .node(&[&bin, "get", "nodes", "nope"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no node `nope` in the model"), "{err}");

    // The status page, as a browser renders it.
    let page = "http://127.0.0.1:8181/";
    if let Ok(png) = std::env::var("SVCFLOW_STATUS_SCREENSHOT") {
        // To look at the page by eye.
        let shot = format!("--screenshot={png}");
        chromium(&sb, &browser, &[&shot, "--window-size=1280,900"], page);
    }
    let dom = chromium(&sb, &browser, &["--dump-dom"], page);
    eprintln!("the status page's DOM is {} bytes", dom.len());
    let node = tag_with(&dom, "data-node=\"n1\" data-connected");
    assert!(node.starts_with("<tr class=\"node\""), "{node}");
    assert!(node.contains("data-connected=\"true\""), "{node}");
    assert!(node.contains("data-role=\"equal\""), "{node}");
    assert!(node.contains("data-writes=\"true\""), "{node}");
    let row = dom.find(node).unwrap();
    let shown: u64 = cell(&dom, row, "num flows").parse().unwrap();
    assert!(shown > 0, "{dom}");
    assert!(cell(&dom, row, "switch").contains("connected"), "{dom}");
    assert!(cell(&dom, row, "last-sync").contains("revision"), "{dom}");
    let service = tag_with(&dom, "data-service=\"default/web\"");
    assert!(service.starts_with("<tr class=\"service\""), "{service}");
    let at = dom.find(service).unwrap();
    let service_row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
    assert!(
        service_row.contains("<code>10.96.0.10</code>"),
        "{service_row}"
    );
    assert!(service_row.contains("<code>80/TCP</code>"), "{service_row}");
    let mut packets = 0;
    for endpoint in ["10.244.0.11:8080", "10.244.0.12:8080"] {
        let li = format!("data-endpoint=\"{endpoint}\" data-node=\"n1\"");
        let at = service_row
            .find(&li)
            .unwrap_or_else(|| panic!("{endpoint} not on the page:\n{service_row}"));
        let counter = "<span class=\"packets\">";
        let from = at + service_row[at..].find(counter).unwrap() + counter.len();
        let end = from + service_row[from..].find('<').unwrap();
        packets += service_row[from..end].parse::<u64>().unwrap();
    }
    assert!(
        packets > 0,
        "the buckets counted the traffic:\n{service_row}"
    );
    assert!(
        dom.contains("<tr class=\"sync\" data-node=\"n1\""),
        "the recent syncs: {dom}"
    );
    let li = tag_with(&dom, "class=\"conflict\" data-node=\"n1\"");
    let at = dom.find(li).unwrap();
    let item = &dom[at..at + dom[at..].find("</li>").unwrap()];
    assert!(item.ends_with(&format!("<b>n1</b>: {conflict}")), "{item}");
}

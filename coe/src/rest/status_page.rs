//! The status page served at `GET /`: the operational nodes and services views as one
//! read-only HTML page, rendered here from an [`OperationalSource`] at each request. Inline
//! CSS, no script, no external asset; it reloads itself every [`REFRESH_SECONDS`]. Every
//! string from the source is HTML-escaped.
//!
//! Elements a test or a scraper can find: `tr.node[data-node]` (with `data-connected`,
//! `data-role` and `data-writes`), `tr.service[data-service="NAMESPACE/NAME"]` with
//! `li.endpoint[data-endpoint][data-node]` (its `.packets`), and `tr.sync[data-node]`
//! (with `data-revision` and `data-result`).

use std::fmt::Write;

use super::operational::{NodeState, OperationalSource, ServiceState, SyncState};

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 5;

/// The page, from `source`'s nodes and services now.
pub async fn render(source: &dyn OperationalSource) -> String {
    let nodes = source.nodes().await;
    let services = source.services().await;
    page(&nodes, &services)
}

/// The page for these views (an `Err` is shown in place of its section).
pub fn page(
    nodes: &Result<Vec<NodeState>, String>,
    services: &Result<Vec<ServiceState>, String>,
) -> String {
    let mut out = String::with_capacity(8192);
    out.push_str(&HEAD.replace("{refresh}", &REFRESH_SECONDS.to_string()));
    let _ = writeln!(
        out,
        "<p class=\"meta\">What this svcflow replica serves, read live from the switches. \
         The page reloads every {REFRESH_SECONDS} s. JSON: \
         <a href=\"/restconf/operational/svcflow:nodes\">nodes</a>, \
         <a href=\"/restconf/operational/service:service-information\">services</a>, \
         <a href=\"/openapi.json\">OpenAPI</a>.</p>"
    );
    out.push_str("<h2>Nodes</h2>\n");
    match nodes {
        Ok(nodes) => nodes_table(&mut out, nodes),
        Err(e) => unavailable(&mut out, "nodes-error", e),
    }
    out.push_str("<h2>Conflicts</h2>\n");
    match nodes {
        Ok(nodes) => conflicts_list(&mut out, nodes),
        Err(e) => unavailable(&mut out, "conflicts-error", e),
    }
    out.push_str("<h2>Services</h2>\n");
    match services {
        Ok(services) => services_table(&mut out, services),
        Err(e) => unavailable(&mut out, "services-error", e),
    }
    out.push_str("<h2>Recent syncs</h2>\n");
    match nodes {
        Ok(nodes) => syncs_table(&mut out, nodes),
        Err(e) => unavailable(&mut out, "syncs-error", e),
    }
    out.push_str("</body>\n</html>\n");
    out
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>svcflow status</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em; color: #1f2328; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 .5em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
p.meta { color: #57606a; margin: 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35em .7em; border-bottom: 1px solid #eaeef2; }
th { background: #f6f8fa; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .92em; }
.badge { display: inline-block; padding: 0 .55em; border-radius: 1em; font-size: .85em; font-weight: 600; white-space: nowrap; }
.ok { background: #dafbe1; color: #116329; }
.off { background: #eaeef2; color: #57606a; }
.warn { background: #fff8c5; color: #7d4e00; }
.bad { background: #ffebe9; color: #a40e26; }
ul.endpoints { list-style: none; margin: 0; padding: 0; }
ul.endpoints li { white-space: nowrap; }
li.endpoint .packets { color: #57606a; margin-left: .3em; }
.none { color: #57606a; font-style: italic; }
p.error { background: #ffebe9; color: #a40e26; padding: .5em .8em; border-radius: 6px; }
</style>
</head>
<body>
<h1>svcflow status</h1>
"#;

/// `s` with `&`, `<`, `>`, `"` and `'` escaped, for text and attribute values alike.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn unavailable(out: &mut String, class: &str, why: &str) {
    let _ = writeln!(
        out,
        "<p class=\"error {class}\">Not available: {}</p>",
        escape(why)
    );
}

fn nodes_table(out: &mut String, nodes: &[NodeState]) {
    if nodes.is_empty() {
        out.push_str("<p class=\"none\">The model has no node yet.</p>\n");
        return;
    }
    out.push_str(
        "<table id=\"nodes\">\n<tr><th>Node</th><th>Switch</th><th>Role</th>\
         <th class=\"num\">Flows</th><th class=\"num\">Groups</th><th>Last sync</th>\
         <th class=\"num\">Took</th></tr>\n",
    );
    for n in nodes {
        let switch = match n.connection {
            Some(c) if n.switch_connected => {
                format!("<span class=\"badge ok\">connected</span> connection {c}")
            }
            _ => "<span class=\"badge off\">not connected</span>".to_string(),
        };
        let role_class = match n.role.as_deref() {
            Some("master") => "ok",
            Some("equal") if n.writes => "ok",
            Some("slave") => "warn",
            Some(_) => "bad",
            None => "off",
        };
        let mut role = match &n.role {
            Some(r) => format!("<span class=\"badge {role_class}\">{}</span>", escape(r)),
            None => "-".to_string(),
        };
        if n.writes && n.role.as_deref() != Some("master") {
            role.push_str(" writes (sole controller)");
        }
        if let Some(master) = &n.master {
            let _ = write!(
                role,
                " mastered by another replica: <code>{}</code>",
                escape(master)
            );
            if let Some(rest) = &n.rest {
                let rest = escape(rest);
                let _ = write!(role, " (<a href=\"{rest}/\">{rest}</a>)");
            }
        }
        let (last, took) = match &n.last_sync {
            Some(s) => (
                format!(
                    "<span class=\"mono\">{}</span> revision {}",
                    escape(&s.time),
                    s.revision
                ),
                s.duration_ms.map_or("-".into(), |ms| format!("{ms:.1} ms")),
            ),
            None => ("<span class=\"none\">never</span>".to_string(), "-".into()),
        };
        let count = |c: Option<u64>| c.map_or("-".to_string(), |c| c.to_string());
        let _ = writeln!(
            out,
            "<tr class=\"node\" data-node=\"{node}\" data-connected=\"{connected}\" \
             data-role=\"{role_attr}\" data-writes=\"{writes}\"><td class=\"name\">{node}</td>\
             <td class=\"switch\">{switch}</td><td class=\"role\">{role}</td>\
             <td class=\"num flows\">{flows}</td><td class=\"num groups\">{groups}</td>\
             <td class=\"last-sync\">{last}</td><td class=\"num duration\">{took}</td></tr>",
            node = escape(&n.node),
            connected = n.switch_connected,
            role_attr = escape(n.role.as_deref().unwrap_or("")),
            writes = n.writes,
            flows = count(n.flows),
            groups = count(n.groups),
        );
    }
    out.push_str("</table>\n");
}

/// What each node this replica writes cannot honour, one item per conflict.
fn conflicts_list(out: &mut String, nodes: &[NodeState]) {
    let all: Vec<(&str, &String)> = nodes
        .iter()
        .flat_map(|n| {
            let conflicts = n.conflicts.as_deref().unwrap_or_default();
            conflicts.iter().map(move |c| (n.node.as_str(), c))
        })
        .collect();
    if all.is_empty() {
        out.push_str(
            "<p class=\"none\" id=\"no-conflicts\">None on the nodes this replica writes.</p>\n",
        );
        return;
    }
    out.push_str("<ul id=\"conflicts\">\n");
    for (node, conflict) in all {
        let node = escape(node);
        let _ = writeln!(
            out,
            "<li class=\"conflict\" data-node=\"{node}\"><b>{node}</b>: {}</li>",
            escape(conflict)
        );
    }
    out.push_str("</ul>\n");
}

fn services_table(out: &mut String, services: &[ServiceState]) {
    if services.is_empty() {
        out.push_str("<p class=\"none\">No service is installed.</p>\n");
        return;
    }
    out.push_str(
        "<table id=\"services\">\n<tr><th>Service</th><th>Cluster IP</th><th>External IP</th>\
         <th>Ports</th><th>Endpoints (packets), by node and group</th>\
         <th class=\"num\">Packets</th><th class=\"num\">Bytes</th></tr>\n",
    );
    for s in services {
        let full = format!("{}/{}", s.namespace, s.name);
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter()
                    .map(|a| format!("<code>{}</code>", escape(a)))
                    .collect::<Vec<_>>()
                    .join("<br>")
            }
        };
        let mut endpoints = String::new();
        if s.groups.is_empty() {
            endpoints.push_str("<span class=\"none\">none: connections are refused</span>");
        }
        for g in &s.groups {
            let _ = write!(
                endpoints,
                "<div class=\"group\" data-node=\"{node}\" data-group=\"{id}\">\
                 {node} · group {id}<ul class=\"endpoints\">",
                node = escape(&g.node),
                id = g.group_id
            );
            if g.buckets.is_empty() {
                endpoints.push_str("<li class=\"none\">no bucket</li>");
            }
            for b in &g.buckets {
                let _ = write!(
                    endpoints,
                    "<li class=\"endpoint\" data-endpoint=\"{ep}\" data-node=\"{node}\">\
                     <code>{ep}</code> <span class=\"packets\">{packets}</span></li>",
                    ep = escape(&b.endpoint),
                    node = escape(&g.node),
                    packets = b.packet_count
                );
            }
            endpoints.push_str("</ul></div>");
        }
        let _ = writeln!(
            out,
            "<tr class=\"service\" data-service=\"{full}\" data-uid=\"{uid}\">\
             <td class=\"name\">{full}</td><td class=\"cluster-ip\">{cluster}</td>\
             <td class=\"external-ip\">{external}</td><td class=\"ports\">{ports}</td>\
             <td class=\"endpoints\">{endpoints}</td><td class=\"num packets\">{packets}</td>\
             <td class=\"num bytes\">{bytes}</td></tr>",
            full = escape(&full),
            uid = escape(&s.uid),
            cluster = list(&s.cluster_ips),
            external = list(&s.external_ips),
            ports = list(&s.ports),
            packets = s.packet_count,
            bytes = s.byte_count,
        );
    }
    out.push_str("</table>\n");
}

fn syncs_table(out: &mut String, nodes: &[NodeState]) {
    let mut syncs: Vec<(&str, &SyncState)> = nodes
        .iter()
        .flat_map(|n| n.syncs.iter().map(move |s| (n.node.as_str(), s)))
        .collect();
    if syncs.is_empty() {
        out.push_str("<p class=\"none\">No sync yet.</p>\n");
        return;
    }
    // Newest first across the nodes (RFC 3339 UTC times sort as text).
    syncs.sort_by(|a, b| b.1.time.cmp(&a.1.time));
    out.push_str(
        "<table id=\"syncs\">\n<tr><th>Time</th><th>Node</th><th class=\"num\">Revision</th>\
         <th>Result</th><th class=\"num\">Took</th><th class=\"num\">Flows added</th>\
         <th class=\"num\">modified</th><th class=\"num\">deleted</th>\
         <th class=\"num\">Groups changed</th><th class=\"num\">Conntrack flushed</th></tr>\n",
    );
    for (node, s) in syncs {
        let result = match &s.error {
            None => format!("<span class=\"badge ok\">{}</span>", escape(&s.result)),
            Some(e) => format!(
                "<span class=\"badge bad\">{}</span> {}",
                escape(&s.result),
                escape(e)
            ),
        };
        let _ = writeln!(
            out,
            "<tr class=\"sync\" data-node=\"{node}\" data-revision=\"{rev}\" \
             data-result=\"{res}\"><td class=\"mono\">{time}</td><td>{node}</td>\
             <td class=\"num\">{rev}</td><td>{result}</td><td class=\"num\">{took}</td>\
             <td class=\"num\">{added}</td><td class=\"num\">{modified}</td>\
             <td class=\"num\">{deleted}</td><td class=\"num\">{groups}</td>\
             <td class=\"num\">{flushed}</td></tr>",
            node = escape(node),
            rev = s.revision,
            res = escape(&s.result),
            time = escape(&s.time),
            took = s.duration_ms.map_or("-".into(), |ms| format!("{ms:.1} ms")),
            added = s.flows_added,
            modified = s.flows_modified,
            deleted = s.flows_deleted,
            groups = s.groups_changed,
            flushed = s.conntrack_flushed,
        );
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::operational::{BucketState, GroupState};

    fn node(name: &str) -> NodeState {
        NodeState {
            node: name.into(),
            switch_connected: true,
            connection: Some(3),
            role: Some("equal".into()),
            writes: true,
            master: None,
            rest: None,
            flows: Some(120),
            groups: Some(2),
            last_sync: None,
            syncs: Vec::new(),
            conflicts: Some(Vec::new()),
        }
    }

    #[test]
    fn every_string_from_the_source_is_escaped() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let mut evil = node("<script>alert(1)</script>");
        evil.master = Some("\"><img src=x>".into());
        evil.rest = Some("javascript:alert(1)\"".into());
        evil.conflicts = Some(vec!["default/x: endpoint <img src=y> is not used".into()]);
        let service = ServiceState {
            uid: "u\"1".into(),
            namespace: "default".into(),
            name: "<b>web</b>".into(),
            cluster_ips: vec!["10.96.0.10".into()],
            external_ips: vec![],
            ports: vec!["80/TCP".into()],
            groups: vec![GroupState {
                node: "n&1".into(),
                group_id: 7,
                group_type: "select".into(),
                buckets: vec![BucketState {
                    bucket_id: 0,
                    endpoint: "<ep>".into(),
                    weight: 100,
                    packet_count: 4,
                    byte_count: 400,
                }],
                packet_count: 4,
                byte_count: 400,
            }],
            flows: vec![],
            packet_count: 4,
            byte_count: 400,
        };
        let html = page(&Ok(vec![evil]), &Ok(vec![service]));
        for raw in [
            "<script>",
            "<img",
            "<b>web",
            "<ep>",
            "n&1",
            "u\"1",
            "alert(1)\"",
        ] {
            assert!(!html.contains(raw), "{raw} unescaped in:\n{html}");
        }
        assert!(
            html.contains("data-service=\"default/&lt;b&gt;web&lt;/b&gt;\""),
            "{html}"
        );
        assert!(!html.contains("<script"), "no script at all");
        assert!(!html.contains("src=\"http"), "no external asset");
    }

    #[test]
    fn nodes_services_and_syncs_have_stable_hooks() {
        let mut n1 = node("n1");
        let sync = SyncState {
            time: "2026-11-24T09:41:00.120Z".into(),
            revision: 5,
            result: "ok".into(),
            duration_ms: Some(12.5),
            error: None,
            flows_added: 3,
            flows_modified: 0,
            flows_deleted: 1,
            groups_changed: 1,
            conntrack_flushed: 0,
        };
        n1.last_sync = Some(sync.clone());
        n1.syncs = vec![sync];
        let mut n2 = node("n2");
        n2.switch_connected = false;
        n2.connection = None;
        n2.role = None;
        n2.writes = false;
        n2.master = Some("tcp:10.0.0.2:6653".into());
        n2.rest = Some("http://10.0.0.2:8181".into());
        let html = page(&Ok(vec![n1.clone(), n2]), &Err("no switch yet".into()));
        assert!(
            html.contains("<p class=\"none\" id=\"no-conflicts\">"),
            "{html}"
        );
        n1.conflicts = Some(vec!["node n6: no tunnel to it".into()]);
        let with = page(&Ok(vec![n1]), &Err("no switch yet".into()));
        assert!(
            with.contains(
                "<li class=\"conflict\" data-node=\"n1\"><b>n1</b>: node n6: no tunnel to it</li>"
            ),
            "{with}"
        );
        assert!(
            html.contains(
                "<tr class=\"node\" data-node=\"n1\" data-connected=\"true\" \
                 data-role=\"equal\" data-writes=\"true\">"
            ),
            "{html}"
        );
        assert!(html.contains("<td class=\"num flows\">120</td>"), "{html}");
        assert!(html.contains("revision 5"), "{html}");
        assert!(html.contains("12.5 ms"), "{html}");
        assert!(
            html.contains("data-node=\"n2\" data-connected=\"false\""),
            "{html}"
        );
        assert!(html.contains("href=\"http://10.0.0.2:8181/\""), "{html}");
        assert!(
            html.contains("<p class=\"error services-error\">Not available: no switch yet</p>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<tr class=\"sync\" data-node=\"n1\" data-revision=\"5\" data-result=\"ok\">"
            ),
            "{html}"
        );
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        assert!(html.ends_with("</html>\n"));
    }
}

//! `svcflow plan [--node N]`: the dry run. Asks the daemon's REST northbound
//! (`GET /restconf/operational/svcflow:plan`) what it would change on each node's live switch
//! now, and prints it as an `ovs-ofctl bundle` file: one `# node …` comment per node, then its
//! changes in the order the daemon would send them. Nothing is changed.

use serde_json::Value;

const PLAN: &str = "/restconf/operational/svcflow:plan";

/// The plan of every node (or of `node`) as text, or as the JSON the northbound answered
/// with `json`.
pub fn plan(
    rest: &str,
    auth: Option<&str>,
    node: Option<&str>,
    json: bool,
) -> Result<String, String> {
    let path = match node {
        Some(n) => format!("{PLAN}/{}", encode(n)),
        None => PLAN.to_string(),
    };
    let body = crate::get::get(rest, &path, auth)?;
    let value: Value =
        serde_json::from_slice(&body).map_err(|e| format!("{rest}{path}: not JSON: {e}"))?;
    let answer = &value["svcflow:plan"];
    if json {
        return serde_json::to_string_pretty(answer)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string());
    }
    Ok(text(answer))
}

/// The answer as a bundle file: the changes under one comment line per node, then a comment
/// for each node not planned here and why.
fn text(answer: &Value) -> String {
    let str_of = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let mut out = String::new();
    for node in answer["nodes"].as_array().into_iter().flatten() {
        let changes: Vec<&str> = node["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let (name, bridge) = (str_of(&node["node"]), str_of(&node["bridge"]));
        if let Some(against) = node["against"].as_str() {
            out.push_str(&format!("# node {name}: {against}\n"));
        }
        if changes.is_empty() {
            out.push_str(&format!(
                "# node {name}: the switch holds the model; nothing to change\n"
            ));
            continue;
        }
        out.push_str(&format!(
            "# node {name}: {} change(s) on {bridge}; to apply them by hand: ovs-ofctl -O \
             OpenFlow13 bundle {bridge} FILE\n",
            changes.len()
        ));
        for line in changes {
            out.push_str(line);
            out.push('\n');
        }
    }
    for node in answer["unreported-nodes"].as_array().into_iter().flatten() {
        let mut line = format!(
            "# node {}: not planned here: {}",
            str_of(&node["node"]),
            str_of(&node["reason"])
        );
        if let (Some(master), Some(rest)) = (node["master"].as_str(), node["rest"].as_str()) {
            line.push_str(&format!(" ({master}; ask `svcflow plan --rest {rest}`)"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `text` as one URL path segment.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plan_prints_as_a_bundle_file_with_a_comment_per_node() {
        let answer = json!({
            "nodes": [
                {"node": "n1", "bridge": "br-int", "changes": [
                    "group add group_id=1,type=select,bucket=actions=output:1",
                    "flow add table=40, priority=100,ip actions=group:1",
                ]},
                {"node": "n2", "bridge": "br-int", "changes": []},
            ],
            "unreported-nodes": [
                {"node": "n3", "reason": "mastered by another replica",
                 "master": "tcp:10.0.0.2:6653", "rest": "http://10.0.0.2:8181"},
                {"node": "n4", "reason": "switch not connected or not synced yet"},
            ],
        });
        assert_eq!(
            text(&answer),
            "# node n1: 2 change(s) on br-int; to apply them by hand: ovs-ofctl -O OpenFlow13 \
             bundle br-int FILE\n\
             group add group_id=1,type=select,bucket=actions=output:1\n\
             flow add table=40, priority=100,ip actions=group:1\n\
             # node n2: the switch holds the model; nothing to change\n\
             # node n3: not planned here: mastered by another replica (tcp:10.0.0.2:6653; ask \
             `svcflow plan --rest http://10.0.0.2:8181`)\n\
             # node n4: not planned here: switch not connected or not synced yet\n"
        );
        assert_eq!(encode("n1 /x"), "n1%20%2Fx");
    }
}

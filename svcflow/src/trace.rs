//! `svcflow trace --node N --from POD|IP --to IP:PORT [--proto tcp|udp]`: the live packet
//! trace. Asks the daemon's REST northbound (`POST /restconf/operations/svcflow:trace`) to
//! inject a tagged probe into the node's switch and prints the path it took, in `ovs-ofctl`
//! terms (`netvirt::trace`).

use netvirt::trace::{Proto, TraceReport, TraceRequest};
use serde_json::{Value, json};

const TRACE: &str = "/restconf/operations/svcflow:trace";

/// The trace as text, or as the JSON the northbound answered with `json`.
pub fn trace(
    rest: &str,
    auth: Option<&str>,
    request: TraceRequest,
    json: bool,
) -> Result<String, String> {
    let body = serde_json::to_vec(&json!({ "input": request })).map_err(|e| e.to_string())?;
    let answer = crate::get::call(rest, "POST", TRACE, auth, Some(&body))?;
    let value: Value =
        serde_json::from_slice(&answer).map_err(|e| format!("{rest}{TRACE}: not JSON: {e}"))?;
    let output = &value["svcflow:output"];
    if json {
        return serde_json::to_string_pretty(output)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string());
    }
    let report: TraceReport = serde_json::from_value(output.clone())
        .map_err(|e| format!("{rest}{TRACE}: not a trace report: {e}"))?;
    Ok(report.to_string())
}

/// `tcp` or `udp`.
pub fn proto(s: &str) -> Result<Proto, String> {
    match s {
        "tcp" => Ok(Proto::Tcp),
        "udp" => Ok(Proto::Udp),
        other => Err(format!("--proto {other:?}: expected tcp or udp")),
    }
}

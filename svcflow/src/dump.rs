//! `svcflow ofp dump-flows` and `dump-groups`: a switch's flows and groups, read over
//! svcflow's own session and printed exactly as `ovs-ofctl -O OpenFlow13 dump-flows --no-stats`
//! and `dump-groups` print them.

use openflow::driver::{DriverConfig, FlowFilter, connect};

use crate::cli::SwitchArgs;
use crate::tls::Tls;

use netvirt::apply::group_from_wire;
use netvirt::flow::{DumpFlow, DumpGroup, FlowEntry, FlowKey};

/// How to reach the switch `args` names: with TLS when its three flags are given (a client
/// config that presents the certificate and checks the switch's against the CA, whatever
/// its name, as Open vSwitch does). An `ssl:` target without them is refused here, by name.
fn config(args: &SwitchArgs) -> Result<DriverConfig, String> {
    let mut config = DriverConfig::default();
    match args.tls().map_err(|e| e.to_string())? {
        Some(files) => {
            let tls = Tls::load(&files).map_err(|e| e.to_string())?;
            config.tls_client = Some(tls.client);
        }
        None if args.target.starts_with("ssl:") => {
            return Err(format!(
                "{}: an ssl: target needs --ssl-private-key, --ssl-certificate and --ssl-ca-cert",
                args.target
            ));
        }
        None => {}
    }
    Ok(config)
}

/// The flows of the switch `args` names (`unix:PATH`, `tcp:IP:PORT` or `ssl:IP:PORT`), one
/// line each, ordered by table, then priority (highest first).
pub async fn dump_flows(args: &SwitchArgs) -> Result<String, String> {
    let target = &args.target;
    let switch = connect(target, config(args)?)
        .await
        .map_err(|e| format!("{target}: {e}"))?;
    let flows = switch
        .dump_flows(FlowFilter::default())
        .await
        .map_err(|e| format!("{target}: dump flows: {e}"))?;
    let mut lines: Vec<(FlowKey, FlowEntry)> = flows
        .into_iter()
        .map(|f| {
            let key = FlowKey::new(f.table_id, f.priority, &f.match_);
            let entry = FlowEntry::new(f.cookie, f.instructions);
            (key, entry)
        })
        .collect();
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    switch.close().await;
    Ok(lines
        .iter()
        .map(|(k, v)| format!("{}\n", DumpFlow(k, v)))
        .collect())
}

/// The groups of the switch `args` names, by id, one line each as `ovs-ofctl dump-groups`
/// prints them below its `OFPST_GROUP_DESC reply` header.
pub async fn dump_groups(args: &SwitchArgs) -> Result<String, String> {
    let target = &args.target;
    let switch = connect(target, config(args)?)
        .await
        .map_err(|e| format!("{target}: {e}"))?;
    let mut groups = switch
        .dump_groups()
        .await
        .map_err(|e| format!("{target}: dump groups: {e}"))?;
    switch.close().await;
    groups.sort_by_key(|g| g.group_id);
    let mut out = String::new();
    for g in &groups {
        match group_from_wire(g.group_type, &g.buckets) {
            Some(entry) => out.push_str(&format!("{}\n", DumpGroup(g.group_id, &entry))),
            None => out.push_str(&format!(
                " group_id={},type={:?} (not shown)\n",
                g.group_id, g.group_type
            )),
        }
    }
    Ok(out)
}

//! A hand-written service load balancer in `ovs-ofctl` syntax: the datapath recipe that
//! svcflow's pipeline grows from. It proves that a select group of `ct(commit,nat(dst=…))`
//! buckets spreads connections, before any controller code is involved.

use crate::{Host, Sandbox, SandboxError};

/// The conntrack zone the recipe uses.
pub const ZONE: u16 = 1;

/// A VIP, its port, and the backends (with the port they listen on) behind it.
#[derive(Debug, Clone)]
pub struct StaticService<'a> {
    /// Virtual IP.
    pub vip: &'a str,
    /// TCP port on the VIP.
    pub port: u16,
    /// Backend hosts.
    pub backends: Vec<&'a Host>,
    /// TCP port the backends listen on.
    pub target_port: u16,
}

impl StaticService<'_> {
    /// The select group, one equal-weight bucket per backend.
    pub fn groups(&self) -> Vec<String> {
        let buckets: Vec<String> = self
            .backends
            .iter()
            .map(|b| {
                format!(
                    "bucket=weight:100,actions=ct(commit,zone={ZONE},nat(dst={}:{}),table=2)",
                    b.ip(),
                    self.target_port
                )
            })
            .collect();
        vec![format!("group_id=1,type=select,{}", buckets.join(","))]
    }

    /// Flows: track every IP packet, send new VIP connections to the group, commit all other
    /// new connections, and deliver by destination IP (rewriting the gateway MAC) to `hosts`.
    pub fn flows(&self, hosts: &[&Host]) -> Vec<String> {
        let mut flows = vec![
            format!("table=0,priority=100,ip,actions=ct(zone={ZONE},nat,table=1)"),
            "table=0,priority=10,arp,actions=NORMAL".to_string(),
            format!(
                "table=1,priority=100,ct_state=+new+trk,tcp,nw_dst={},tp_dst={},actions=group:1",
                self.vip, self.port
            ),
            format!(
                "table=1,priority=90,ct_state=+new+trk,ip,actions=ct(commit,zone={ZONE},table=2)"
            ),
            "table=1,priority=80,ct_state=+est+trk,ip,actions=resubmit(,2)".to_string(),
            "table=1,priority=80,ct_state=+rel+trk,ip,actions=resubmit(,2)".to_string(),
        ];
        flows.extend(hosts.iter().map(|h| {
            format!(
                "table=2,priority=100,ip,nw_dst={},actions=set_field:{}->eth_dst,output:{}",
                h.ip(),
                h.mac(),
                h.ofport()
            )
        }));
        flows
    }

    /// Installs the group and the flows (delivering to `hosts`) on `bridge`.
    pub fn install(&self, sb: &Sandbox, bridge: &str, hosts: &[&Host]) -> Result<(), SandboxError> {
        let groups = self.groups();
        let flows = self.flows(hosts);
        sb.add_groups(
            bridge,
            &groups.iter().map(String::as_str).collect::<Vec<_>>(),
        )?;
        sb.add_flows(
            bridge,
            &flows.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    }
}

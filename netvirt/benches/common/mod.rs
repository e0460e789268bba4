//! What the netvirt benches share: the nodes, their bindings and a model of S ClusterIP
//! services with E endpoints each.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use netvirt::desired::{GatewayPort, NodeBindings, Uplink};
use netvirt::model::{Endpoint, MacAddr, Model, Node, Service, ServiceKey, ServicePort};

/// A comma-separated list of numbers from the environment, or `default`.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

/// Node `i`, with its own address and pod subnet.
pub fn node(i: usize) -> Node {
    Node {
        name: format!("n{i}"),
        ips: vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10 + i as u8))],
        pod_cidrs: format!("10.244.{i}.0/24").parse().into_iter().collect(),
        labels: BTreeMap::new(),
    }
}

/// Node `i`'s ports: the gateway on 2, the uplink on 1.
pub fn bindings(i: usize) -> NodeBindings {
    NodeBindings {
        gateway: Some(GatewayPort {
            ofport: 2,
            mac: MacAddr([0x0a, 0x58, 0, 0, 0, 2]),
        }),
        uplink: Some(Uplink {
            ofport: 1,
            mac: MacAddr([2, 0, 0, 0, i as u8, 1]),
            next_hop_mac: MacAddr([2, 0, 0, 0, 0, 0xe1]),
        }),
        ..NodeBindings::default()
    }
}

/// S ClusterIP services with E endpoints each, spread over the nodes' pods.
pub fn model(services: u32, endpoints: u32, nodes: usize) -> Model {
    let mut m = Model::default();
    for n in 0..nodes {
        m.nodes.insert(format!("n{n}"), node(n));
    }
    for i in 0..services {
        let key = ServiceKey::new("bench", &format!("svc-{i}"));
        let service = Service::cluster_ip(
            key.clone(),
            format!("uid-{i}"),
            IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i + 1)),
            vec![ServicePort::tcp("http", 80, 8080)],
        );
        m.services.insert(key.clone(), service);
        let eps = (0..endpoints)
            .map(|j| {
                Endpoint::new(
                    IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + i * 16 + j)),
                    Vec::new(),
                    Some(format!("n{}", (i + j) as usize % nodes.max(1))),
                )
            })
            .collect();
        m.endpoints.insert(key, eps);
    }
    m
}

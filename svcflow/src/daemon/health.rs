//! The `healthCheckNodePort` server: for each LoadBalancer service with
//! `externalTrafficPolicy: Local`, an HTTP listener on its health-check node port that answers
//! as kube-proxy's does, 200 when the node has ready local endpoints and 503 when it has none,
//! with the JSON body of [`netvirt::health::HealthCheck::body`]. Load balancers probe it on
//! every node to send traffic only to nodes that hold endpoints.
//!
//! This server answers on the host the daemon runs on (`--host-node`), for its own processes;
//! probes that reach any node through its switch (from a load balancer) are answered by the
//! controller through the switch (`netvirt::health_answer`), on every node. Listeners follow
//! the model: one per port, opened when a service gains the port and closed when it loses it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use coe::rest::Published;
use netvirt::health::{HealthCheck, KeptHealthChecks};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Shutdown, stopped};

/// The largest request head read before answering.
const MAX_REQUEST: usize = 8192;
/// A client that sends no complete request head within this is answered anyway.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

type Checks = watch::Receiver<BTreeMap<u16, HealthCheck>>;

/// Serves `node`'s health checks on `bind` until shutdown.
pub(crate) async fn serve(
    node: String,
    bind: IpAddr,
    mut models: watch::Receiver<Arc<Published>>,
    shutdown: Shutdown,
) {
    let (checks_tx, checks) = watch::channel(BTreeMap::new());
    let mut listeners: BTreeMap<u16, JoinHandle<()>> = BTreeMap::new();
    let mut failed: BTreeMap<u16, String> = BTreeMap::new();
    let stop = stopped(shutdown);
    tokio::pin!(stop);
    // Kept by key: a change costs what it touched, not a pass over every service.
    let mut kept = KeptHealthChecks::default();
    loop {
        kept.update(&models.borrow_and_update().model, &node);
        let now = kept.checks();
        listeners.retain(|port, task| {
            let keep = now.contains_key(port);
            if !keep {
                task.abort();
                tracing::info!(port, "health-check node port closed");
            }
            keep
        });
        failed.retain(|port, _| now.contains_key(port));
        for (port, check) in &now {
            if listeners.contains_key(port) {
                continue;
            }
            let addr = SocketAddr::new(bind, *port);
            match TcpListener::bind(addr).await {
                Ok(listener) => {
                    tracing::info!(port, service = %check.service, "health-check node port open");
                    failed.remove(port);
                    listeners.insert(*port, tokio::spawn(accept(listener, *port, checks.clone())));
                }
                Err(e) => {
                    // Warn once per port and error; retried on the next model change.
                    let why = e.to_string();
                    if failed.get(port) != Some(&why) {
                        tracing::warn!(port, service = %check.service, "cannot listen on {addr}: {why}");
                        failed.insert(*port, why);
                    }
                }
            }
        }
        checks_tx.send_if_modified(|old| {
            let changed = *old != now;
            *old = now;
            changed
        });
        tokio::select! {
            changed = models.changed() => if changed.is_err() { break },
            () = &mut stop => break,
        }
    }
    for task in listeners.into_values() {
        task.abort();
    }
}

async fn accept(listener: TcpListener, port: u16, checks: Checks) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, port, checks.clone()));
            }
            Err(e) => {
                tracing::debug!(port, "health-check accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads the request head (whatever its method and path, as kube-proxy) and answers with
/// the port's current state.
async fn answer(mut stream: TcpStream, port: u16, checks: Checks) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while head.len() < MAX_REQUEST && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
            }
        }
    };
    let _ = tokio::time::timeout(READ_TIMEOUT, read).await;
    let check = checks.borrow().get(&port).cloned();
    let response = response(check.as_ref());
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The HTTP response for `check` (none: the port just closed, so no local endpoint).
fn response(check: Option<&HealthCheck>) -> String {
    match check {
        Some(c) => c.http_response(),
        None => netvirt::health::http_response(503, 0, "{\"localEndpoints\":0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvirt::model::{
        Endpoint, EndpointConditions, Model, Protocol, Service, ServiceKey, ServicePort,
        ServiceType, TargetPort, TrafficPolicy,
    };

    fn model(port: u16, local: &[&str]) -> Arc<Published> {
        let key = ServiceKey::new("default", "web");
        let mut model = Model::default();
        model.services.insert(
            key.clone(),
            Service {
                key: key.clone(),
                uid: "u".into(),
                kind: ServiceType::LoadBalancer,
                cluster_ips: vec!["10.96.0.10".parse().unwrap()],
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 80,
                    target_port: TargetPort::Number(8080),
                    node_port: Some(30080),
                }],
                external_ips: vec![],
                lb_ingress_ips: vec!["198.18.0.60".parse().unwrap()],
                session_affinity: Default::default(),
                external_traffic_policy: TrafficPolicy::Local,
                internal_traffic_policy: TrafficPolicy::Cluster,
                lb_source_ranges: vec![],
                health_check_node_port: Some(port),
                topology: Default::default(),
                traffic_distribution: Default::default(),
            },
        );
        let endpoints = local
            .iter()
            .enumerate()
            .map(|(i, node)| Endpoint {
                address: IpAddr::from([10, 244, 0, 11 + i as u8]),
                ports: vec![],
                node: Some((*node).to_string()),
                conditions: EndpointConditions::default(),
                zone: None,
                zone_hints: vec![],
                node_hints: Vec::new(),
                weight: None,
            })
            .collect();
        model.endpoints.insert(key, endpoints);
        Arc::new(Published {
            model,
            ovsdb_remotes: BTreeMap::new(),
            revision: 1,
            part_of: None,
        })
    }

    async fn get(port: u16) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        Some(out)
    }

    async fn until(port: u16, want: &str) -> String {
        for _ in 0..100 {
            if let Some(text) = get(port).await
                && text.contains(want)
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("port {port} never answered {want:?}: {:?}", get(port).await);
    }

    #[tokio::test]
    async fn answers_200_with_local_endpoints_and_503_without_and_follows_the_model() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (models_tx, models) = watch::channel(model(port, &["n1", "n1", "n2"]));
        let (stop_tx, shutdown) = watch::channel(false);
        let task = tokio::spawn(serve(
            "n1".into(),
            IpAddr::from([127, 0, 0, 1]),
            models,
            shutdown,
        ));
        let ok = until(port, "HTTP/1.1 200 OK").await;
        assert!(
            ok.ends_with(
                r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":2,"serviceProxyHealthy":true}"#
            ),
            "{ok}"
        );
        assert!(ok.contains("Content-Type: application/json\r\n"), "{ok}");
        assert!(
            ok.contains("X-Load-Balancing-Endpoint-Weight: 2\r\n"),
            "{ok}"
        );
        // The local endpoints move away: 503, same body shape.
        models_tx.send(model(port, &["n2"])).unwrap();
        let gone = until(port, "HTTP/1.1 503 Service Unavailable").await;
        assert!(gone.contains(r#""localEndpoints":0"#), "{gone}");
        // The service loses its health-check port: the listener closes.
        let mut without = (*model(port, &["n1"])).clone();
        without.model.services = without
            .model
            .services
            .into_iter()
            .map(|(k, mut s)| {
                s.health_check_node_port = None;
                (k, s)
            })
            .collect();
        models_tx.send(Arc::new(without)).unwrap();
        for _ in 0..100 {
            if get(port).await.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(get(port).await.is_none(), "port {port} still answers");
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn a_port_without_a_check_answers_503() {
        let text = response(None);
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
    }
}

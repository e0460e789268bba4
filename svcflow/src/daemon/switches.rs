//! The OpenFlow side: accept switches and tell the reconcile task when each comes and goes.
//!
//! With TLS, a switch is who its certificate says: the datapath id it claims must be the one
//! svcflow gives the node its certificate names (`netvirt::node_setup::datapath_id(CN)`), or
//! the connection is refused and logged before the reconcile task hears of it.

use openflow::driver::{Listener, SwitchEvent, SwitchHandle};
use tokio::sync::mpsc;

use super::{Change, Shutdown, stopped};

/// Accepts switches until shutdown. Each connection gets a number; when it closes, the
/// reconcile task hears `SwitchDown` with that number, so a late close of an old connection
/// never removes its replacement.
pub(crate) async fn accept(
    mut listener: Listener,
    tls: bool,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
) {
    let mut next_id = 0u64;
    loop {
        let switch = tokio::select! {
            _ = stopped(shutdown.clone()) => return,
            accepted = listener.accept() => match accepted {
                Ok(switch) => switch,
                Err(e) => {
                    tracing::error!("OpenFlow listener stopped: {e}");
                    return;
                }
            },
        };
        let node = match tls.then(|| identity(&switch)).transpose() {
            Ok(node) => node,
            Err(why) => {
                tracing::warn!(
                    "switch with datapath id {:016x} refused: {why}",
                    switch.datapath_id()
                );
                switch.close().await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        tracing::info!(
            "switch connected: datapath id {:016x} (connection {id}){}",
            switch.datapath_id(),
            node.map_or(String::new(), |n| format!(", certificate of node {n}"))
        );
        let watcher = switch.clone();
        let tx = changes.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stopped(shutdown) => {}
                _ = log_discarded(&watcher, id) => {}
                why = watcher.closed() => {
                    tracing::info!(
                        "switch disconnected: datapath id {:016x} (connection {id}): {why}",
                        watcher.datapath_id()
                    );
                    let _ = tx.send(Change::SwitchDown(id));
                }
            }
        });
        if changes.send(Change::SwitchUp(id, switch)).is_err() {
            return;
        }
    }
}

/// The node a TLS switch's certificate names, if the datapath id it claims is that node's.
fn identity(switch: &SwitchHandle) -> Result<String, String> {
    let cert = switch
        .peer_certificate()
        .ok_or_else(|| crate::tls::IdentityError::NoCertificate.to_string())?;
    let node = crate::tls::name::common_name(cert).map_err(|e| e.to_string())?;
    let owns = netvirt::node_setup::datapath_id(&node);
    if owns == switch.datapath_id() {
        Ok(node)
    } else {
        Err(format!(
            "its certificate is node {node:?}'s, whose datapath id is {owns:016x}"
        ))
    }
}

/// Logs the messages from the switch that did not decode (answered with an error and dropped
/// by the session): the first ten, then every thousandth, so that a peer sending garbage
/// cannot flood the log. Never returns while the connection lasts.
async fn log_discarded(switch: &SwitchHandle, connection: u64) {
    let mut events = switch.events();
    let mut count = 0u64;
    loop {
        match events.recv().await {
            Ok(SwitchEvent::Discarded {
                msg_type,
                xid,
                error,
            }) => {
                count += 1;
                if count <= 10 || count % 1000 == 0 {
                    tracing::warn!(
                        "switch {:016x} (connection {connection}) sent a message that does not \
                         decode (type {msg_type}, xid {xid}): {error}; answered with an error \
                         and dropped ({count} so far)",
                        switch.datapath_id()
                    );
                }
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                std::future::pending::<()>().await;
            }
        }
    }
}

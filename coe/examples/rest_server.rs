//! Serves the REST northbound on its own, for trying it with curl:
//!
//! ```sh
//! cargo run -p coe --example rest_server -- /tmp/svcflow-state [127.0.0.1:8181] [credentials-file]
//! ```
//!
//! Each published model is printed as a one-line summary.

use std::sync::Arc;

use coe::rest::operational::Unavailable;
use coe::rest::{Northbound, RestConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let state = args
        .next()
        .ok_or("usage: rest_server <state-dir> [listen] [credentials]")?;
    let mut config = RestConfig::new(state);
    if let Some(listen) = args.next() {
        config.listen = listen.parse()?;
    }
    config.auth_file = args.next().map(Into::into);
    let nb = Northbound::open(&config, Arc::new(Unavailable))?;
    let mut models = nb.subscribe();
    tokio::spawn(async move {
        loop {
            {
                let p = models.borrow_and_update();
                println!(
                    "revision {}: {} nodes, {} pods, {} services, {} endpoints, remotes {:?}",
                    p.revision,
                    p.model.nodes.len(),
                    p.model.pods.len(),
                    p.model.services.len(),
                    p.model.endpoints.values().map(Vec::len).sum::<usize>(),
                    p.ovsdb_remotes
                );
            }
            if models.changed().await.is_err() {
                break;
            }
        }
    });
    println!("listening on {}", config.listen);
    nb.serve(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

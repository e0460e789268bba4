//! `svcflow store`: moving the REST state between a local log and an OVSDB cluster.

use std::path::PathBuf;
use std::time::Duration;

use coe::rest::durable::{ApplyError, DurableStore, OpenError};
use coe::rest::replicated::{Replicated, SCHEMA, WriteError};
use coe::rest::store::Rules;
use coe::rest::{StoreKind, transfer};

use crate::cli::{StoreArgs, StoreCommand};
use crate::config::parse_port_range;

/// How long to wait for an OVSDB cluster's leader and state.
const READY: Duration = Duration::from_secs(30);

/// Runs the command; returns what to print.
pub fn run(command: &StoreCommand) -> Result<String, String> {
    match command {
        StoreCommand::Schema => Ok(SCHEMA.to_string()),
        StoreCommand::Export(args) => {
            let (store, rules, dir) = target(args)?;
            // What the current rules refuse in a local store, exported all the same.
            let mut refused = None;
            let doc = match store {
                StoreKind::Local => {
                    let (d, invalid) = DurableStore::open_for_repair(&dir, rules)
                        .map_err(|e| local_error(&dir, e))?;
                    refused = invalid;
                    transfer::export(d.store(), d.seq())
                }
                StoreKind::Ovsdb(remotes) => on_cluster(&remotes, rules, |r| async move {
                    let m = r
                        .mirror()
                        .lock()
                        .map_err(|_| "the mirror lock is poisoned")?;
                    Ok(transfer::export(&m.store, m.revision))
                })?,
            };
            let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
            std::fs::write(&args.file, text + "\n")
                .map_err(|e| format!("writing {}: {e}", args.file.display()))?;
            let mut out = format!(
                "exported revision {} to {}\n",
                doc["revision"],
                args.file.display()
            );
            if let Some(error) = refused {
                out.push_str(&format!(
                    "the current rules refuse this state ({error}), so svcflow run refuses to \
                     start on it: correct that in {} and run svcflow store import with it\n",
                    args.file.display()
                ));
            }
            Ok(out)
        }
        StoreCommand::Import(args) => {
            let (store, rules, dir) = target(args)?;
            let bytes = std::fs::read(&args.file)
                .map_err(|e| format!("reading {}: {e}", args.file.display()))?;
            let change =
                transfer::change(&bytes).map_err(|e| format!("{}: {e}", args.file.display()))?;
            match store {
                StoreKind::Local => {
                    // A state the current rules refuse is what an import corrects: every
                    // container is replaced at once, and checked as a PUT of the datastore
                    // would be; a refused import changes nothing.
                    let (mut d, _) = DurableStore::open_for_repair(&dir, rules.clone())
                        .map_err(|e| local_error(&dir, e))?;
                    d.apply(change).map_err(|e| match e {
                        ApplyError::Request(e) => format!("refused: {}", e.body()),
                        ApplyError::Wal(e) => format!("storing the change: {e}"),
                    })?;
                    if let Err(e) = d.store().check(&rules, &Default::default()) {
                        return Err(format!(
                            "imported, but the current rules still refuse the state ({e})"
                        ));
                    }
                    Ok(format!(
                        "imported; the local store is at revision {}\n",
                        d.seq()
                    ))
                }
                StoreKind::Ovsdb(remotes) => on_cluster(&remotes, rules, |r| async move {
                    r.write(change).await.map_err(|e| match e {
                        WriteError::Request(e) => format!("refused: {}", e.body()),
                        WriteError::Unavailable(why)
                        | WriteError::Unknown(why)
                        | WriteError::Failed(why) => why,
                    })?;
                    let revision = r.mirror().lock().map(|m| m.revision).unwrap_or_default();
                    Ok(format!("imported; the cluster is at revision {revision}\n"))
                }),
            }
        }
    }
}

fn target(args: &StoreArgs) -> Result<(StoreKind, Rules, PathBuf), String> {
    let store: StoreKind = args.store.as_deref().unwrap_or("local").parse()?;
    let mut rules = Rules::default();
    if let Some(range) = &args.node_port_range {
        let (lo, hi) = parse_port_range(range).map_err(|e| e.to_string())?;
        rules.node_port_range = lo..=hi;
    }
    let dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/svcflow"));
    Ok((store, rules, dir))
}

fn local_error(dir: &std::path::Path, e: OpenError) -> String {
    let hint = match e {
        OpenError::Locked(_) => " (a running daemon holds it: stop it first)",
        _ => "",
    };
    format!("the local store in {}: {e}{hint}", dir.display())
}

/// Runs `f` on a mirror of the cluster once it has a leader and the state.
fn on_cluster<T, F, Fut>(remotes: &[String], rules: Rules, f: F) -> Result<T, String>
where
    F: FnOnce(std::sync::Arc<Replicated>) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let r = std::sync::Arc::new(Replicated::start(remotes, rules, || {})?);
        r.wait_ready(READY).await.map_err(|e| match e {
            WriteError::Unavailable(why) | WriteError::Unknown(why) | WriteError::Failed(why) => {
                why
            }
            WriteError::Request(e) => e.to_string(),
        })?;
        f(r).await
    })
}

//! The REST northbound: OpenDaylight COE's RESTCONF API, driving svcflow.
//!
//! Pure layers: [`types`] (the validated objects), [`parse`] (COE JSON → objects),
//! [`transfer`] (the export document), [`record`] (the log's records, encoded and decoded),
//! [`store`] (atomic, validated changes), [`to_model`] (store → [`netvirt::model::Model`], whole or
//! by key after each write).
//! I/O: [`wal`] (the checksummed, fsynced log), [`durable`] (the store over the log),
//! [`replicated`] (the store in a Raft-clustered ovsdb-server, `--store ovsdb:`),
//! [`auth`] (credentials), [`limits`] (idle connections and the body budget), [`body`]
//! (a request's body read whole as it arrives), [`tls`] (HTTPS)
//! and [`server`]
//! (the axum router and listener), which also serves [`status_page`] at `/`.
//!
//! The daemon calls [`Northbound::open`] with a [`RestConfig`] and an
//! [`operational::OperationalSource`], subscribes to the [`Published`] models, and serves
//! [`Northbound::router`] (or calls [`Northbound::serve`]).
//!
//! A service with no ports (the design document's minimal form) forwards every port. The
//! model has no way to say so; such a service reaches the model with an empty `ports`
//! list, and netvirt must read an empty list as "all ports".

pub mod auth;
pub mod body;
pub mod config;
pub mod durable;
pub mod error;
pub mod limits;
pub mod openapi;
pub mod operational;
pub mod parse;
pub mod record;
pub mod replicated;
pub mod server;
pub mod status_page;
pub mod store;
pub mod tls;
pub mod to_model;
pub mod transfer;
pub mod types;
pub mod wal;

pub use config::{RestConfig, StoreKind};
pub use server::{Northbound, PUBLISH_PART, Published, StartError};

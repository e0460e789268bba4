//! RFC 7047 (OVSDB) client: JSON-RPC 1.0 framing, a sans-IO session and typed Open_vSwitch helpers.
//!
//! Layers, bottom up:
//! - [`framer`]: splits a byte stream into JSON objects, with size and depth limits.
//! - [`jsonrpc`]: JSON-RPC 1.0 messages (RFC 7047 §4); never sends `"jsonrpc": "2.0"`.
//! - [`datum`], [`ops`], [`schema`], [`monitor`]: OVSDB data, transact operations and typed
//!   results, schemas, monitor requests and updates (RFC 7047 §3, §5).
//! - [`session`]: the sans-IO protocol state machine (`handle_bytes`, `poll_transmit`,
//!   `poll_event`, `poll_timeout`); answers `echo`, probes idle peers, re-establishes monitors
//!   and locks after [`Session::reset`].
//! - [`replica`]: an in-memory table cache fed by monitor updates.
//! - [`client`]: a thin tokio driver (active `unix:`/`tcp:`/`ssl:` with reconnect, passive
//!   `ptcp:`/`pssl:`, and a Raft cluster's leader, followed from member to member); TLS with
//!   the caller's rustls configs.
//! - [`cluster`]: what `_Server` says of a clustered database (pure), and the probe of a
//!   member (I/O).
//! - [`vswitch`]: typed Open_vSwitch rows and idempotent helpers.
//!
//! ```no_run
//! use ovsdb::client::ClientConfig;
//! use ovsdb::vswitch::{BridgeSpec, FailMode, InterfaceType, PortSpec, VSwitch, VSwitchQuery};
//! # async fn demo() -> Result<(), ovsdb::Error> {
//! let (vs, _events) = VSwitch::connect("unix:/var/run/openvswitch/db.sock", ClientConfig::default()).await?;
//! let mut br = BridgeSpec::new("br-int");
//! br.datapath_type = Some("netdev".into());
//! br.fail_mode = Some(FailMode::Secure);
//! br.protocols = vec!["OpenFlow13".into()];
//! vs.ensure_bridge(&br).await?; // a no-op when already so
//! vs.add_port("br-int", &PortSpec::new("svc-gw", InterfaceType::Internal)).await?;
//! let ofport = vs.wait_ofport("svc-gw", std::time::Duration::from_secs(10)).await?;
//! assert!(vs.replica.read().bridge("br-int").is_some()); // no I/O
//! # let _ = ofport; Ok(()) }
//! ```

pub mod client;
pub mod cluster;
pub mod datum;
pub mod framer;
pub mod jsonrpc;
pub mod monitor;
pub mod ops;
pub mod replica;
pub mod schema;
pub mod session;
pub mod vswitch;

pub use client::{
    Accepted, Client, ClientConfig, ClientEvent, Error, Events, Listener, PeerCertificate,
    PendingTransact, ReplicaHandle,
};
pub use datum::{Atom, Datum, Row, Uuid};
pub use ops::{
    Condition, ErrorKind, Function, Mutation, Mutator, OpResult, Operation, TransactError, Until,
};
pub use replica::Replica;
pub use session::{
    Event, Reply, RequestError, RequestId, Session, SessionConfig, SessionError, UpdateKind,
};
pub use tokio_rustls::rustls;

//! [`SwitchHandle`]: the cloneable async API the controller uses to talk to one switch.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::conn::{self, Shared};
use super::{DriverConfig, Error, PeerCertificate};
use crate::msg::{
    AsyncConfig, Body, ErrorMsg, Features, FlowRemoved, FlowStats, FlowStatsRequest, GroupDesc,
    Message, MeterConfig, MeterStats, MultipartBody, MultipartReply, MultipartRequest, OFPM_ALL,
    PacketIn, PortStatus, Role,
};
use crate::session::{Reply, RoleStatus, SendError, Session, SessionError};

/// A command from a handle to the connection task.
pub(crate) enum Command {
    Send {
        bodies: Vec<Body>,
        done: oneshot::Sender<Result<Vec<u32>, SendError>>,
    },
    Request {
        body: Body,
        done: oneshot::Sender<Result<Reply, Error>>,
    },
    Barrier {
        done: oneshot::Sender<Result<Reply, Error>>,
    },
    Bundle {
        bodies: Vec<Body>,
        done: oneshot::Sender<Result<Reply, Error>>,
    },
    Close,
}

/// The connection's state, as a [`watch`] value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    /// HELLO/FEATURES in progress.
    Connecting,
    /// Ready; the switch's features (with its datapath id).
    Connected(Features),
    /// Over.
    Disconnected(SessionError),
}

/// Asynchronous messages from the switch and connection changes, as a [`broadcast`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchEvent {
    /// The handshake completed.
    Connected {
        /// The switch's datapath id.
        datapath_id: u64,
    },
    /// The session closed.
    Disconnected(SessionError),
    /// `OFPT_PACKET_IN`.
    PacketIn(PacketIn),
    /// `OFPT_PORT_STATUS`.
    PortStatus(PortStatus),
    /// `OFPT_FLOW_REMOVED`.
    FlowRemoved(FlowRemoved),
    /// `ONFT_ROLE_STATUS`: another controller took our role.
    RoleStatus(RoleStatus),
    /// An error for a message sent with [`SwitchHandle::send`] while no barrier was waiting.
    Error {
        /// The xid `send` returned.
        xid: u32,
        /// The error.
        error: ErrorMsg,
    },
    /// Any other unsolicited message.
    Message(Message),
    /// An unsolicited message that did not decode: answered with an `OFPT_ERROR`, dropped,
    /// and the connection kept.
    Discarded {
        /// Its `ofp_type`.
        msg_type: u8,
        /// Its xid.
        xid: u32,
        /// Why it did not decode.
        error: crate::error::DecodeError,
    },
}

/// Which flows [`SwitchHandle::dump_flows`] returns (OF1.3 §7.3.5.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// One table, or all when `None`.
    pub table_id: Option<u8>,
    /// Cookie bits to match (under `cookie_mask`).
    pub cookie: u64,
    /// Which cookie bits must match; 0 matches every flow.
    pub cookie_mask: u64,
}

struct Inner {
    cmds: mpsc::Sender<Command>,
    events: broadcast::Sender<SwitchEvent>,
    state: watch::Receiver<ConnState>,
    role: watch::Receiver<Option<RoleStatus>>,
    features: Features,
    peer_certificate: Option<PeerCertificate>,
}

/// A connected switch. Clones share the connection, which closes when the last clone is
/// dropped or [`SwitchHandle::close`] is called.
#[derive(Clone)]
pub struct SwitchHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SwitchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SwitchHandle({:016x})", self.inner.features.datapath_id)
    }
}

/// Spawns the connection task for `stream` and waits for the handshake. `peer_certificate`
/// is the certificate a TLS peer presented, kept for [`SwitchHandle::peer_certificate`].
pub(crate) async fn start<S>(
    stream: S,
    config: DriverConfig,
    peer_certificate: Option<PeerCertificate>,
) -> Result<SwitchHandle, Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let session = Session::new(config.session.clone(), std::time::Instant::now());
    let (cmd_tx, cmd_rx) = mpsc::channel(config.command_queue.max(1));
    let (events_out, events_in) = oneshot::channel();
    let (state_tx, mut state) = watch::channel(ConnState::Connecting);
    let (role_tx, role) = watch::channel(None);
    let shared = Shared {
        events: None,
        event_queue: config.event_queue,
        events_out: Some(events_out),
        state: state_tx,
        role: role_tx,
    };
    tokio::spawn(conn::run(stream, session, cmd_rx, shared, config));
    let features = loop {
        match &*state.borrow_and_update() {
            ConnState::Connected(f) => break *f,
            ConnState::Disconnected(e) => return Err(Error::Closed(e.clone())),
            ConnState::Connecting => {}
        }
        if state.changed().await.is_err() {
            return Err(Error::Closed(SessionError::Local));
        }
    };
    // Sent just before the state says Connected.
    let events = events_in
        .await
        .map_err(|_| Error::Closed(SessionError::Local))?;
    Ok(SwitchHandle {
        inner: Arc::new(Inner {
            cmds: cmd_tx,
            events,
            state,
            role,
            features,
            peer_certificate,
        }),
    })
}

impl SwitchHandle {
    /// The switch's datapath id.
    pub fn datapath_id(&self) -> u64 {
        self.inner.features.datapath_id
    }

    /// The end-entity certificate the switch presented over TLS (`ssl:`/`pssl:`; verified
    /// against the CA of the rustls config), or `None` on `tcp:` and `unix:`. What name it
    /// must carry is the caller's policy.
    pub fn peer_certificate(&self) -> Option<&PeerCertificate> {
        self.inner.peer_certificate.as_ref()
    }

    /// The switch's FEATURES_REPLY.
    pub fn features(&self) -> Features {
        self.inner.features
    }

    /// Subscribes to asynchronous messages and connection changes from now on. A subscriber
    /// that falls more than the event queue behind loses the oldest (tokio `broadcast`).
    pub fn events(&self) -> broadcast::Receiver<SwitchEvent> {
        self.inner.events.subscribe()
    }

    /// The last `ROLE_STATUS` the switch sent on this connection (another controller took
    /// the master role, …), without the other events: what a task that only cares about its
    /// role follows.
    pub fn role_status(&self) -> watch::Receiver<Option<RoleStatus>> {
        self.inner.role.clone()
    }

    /// The connection state.
    pub fn state(&self) -> watch::Receiver<ConnState> {
        self.inner.state.clone()
    }

    /// True once the connection is over.
    pub fn is_closed(&self) -> bool {
        matches!(*self.inner.state.borrow(), ConnState::Disconnected(_))
    }

    /// Waits until the connection is over and says why.
    pub async fn closed(&self) -> SessionError {
        let mut state = self.inner.state.clone();
        loop {
            if let ConnState::Disconnected(e) = &*state.borrow_and_update() {
                return e.clone();
            }
            if state.changed().await.is_err() {
                return SessionError::Local;
            }
        }
    }

    /// Closes the connection.
    pub async fn close(&self) {
        let _ = self.inner.cmds.send(Command::Close).await;
    }

    /// Hands a command to the connection's task; the receiver gets its answer.
    async fn queue<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<oneshot::Receiver<T>, Error> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .cmds
            .send(make(tx))
            .await
            .map_err(|_| self.gone())?;
        Ok(rx)
    }

    async fn command<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, Error> {
        let rx = self.queue(make).await?;
        rx.await.map_err(|_| self.gone())
    }

    /// Why a command found the connection's task gone.
    fn gone(&self) -> Error {
        match &*self.inner.state.borrow() {
            ConnState::Disconnected(e) => Error::Closed(e.clone()),
            _ => Error::Closed(SessionError::Local),
        }
    }

    /// Queues one message that expects no reply and returns its xid. An error for it is
    /// reported by the next [`SwitchHandle::barrier`] (and also as [`SwitchEvent::Error`] if no
    /// barrier was waiting when it arrived).
    pub async fn send(&self, body: Body) -> Result<u32, Error> {
        let xids = self.send_batch(vec![body]).await?;
        xids.first()
            .copied()
            .ok_or(Error::UnexpectedReply("no xid".into()))
    }

    /// Queues messages back to back (pipelined, no round trip) and returns their xids. Stops
    /// at the first message that cannot be encoded; those before it are queued.
    pub async fn send_batch(&self, bodies: Vec<Body>) -> Result<Vec<u32>, Error> {
        Ok(self
            .command(|done| Command::Send { bodies, done })
            .await??)
    }

    /// Sends a request and waits for its reply, all parts of a multipart reply joined.
    pub async fn request(&self, body: Body) -> Result<Reply, Error> {
        self.command(|done| Command::Request { body, done }).await?
    }

    /// Waits until the switch has processed everything sent before; fails with
    /// [`crate::session::RequestError::SendsFailed`] naming messages it refused meanwhile.
    pub async fn barrier(&self) -> Result<(), Error> {
        self.command(|done| Command::Barrier { done })
            .await?
            .map(|_| ())
    }

    /// Applies `bodies` atomically and in order, as one bundle. On failure nothing is applied
    /// and the error names each refused message by its index in `bodies`. Nothing is split:
    /// a message too big for a BUNDLE_ADD fails the call before anything is sent.
    pub async fn bundle(&self, bodies: Vec<Body>) -> Result<(), Error> {
        self.queue_bundle(bodies).await?.applied().await
    }

    /// Queues `bodies` as one bundle, as [`SwitchHandle::bundle`] does, and returns once it
    /// is queued, with a [`QueuedBundle`] that resolves when the switch has applied or refused
    /// it. Bundles queued one after another go to the switch in order, so a caller can
    /// prepare the next bundle while the switch applies this one.
    pub async fn queue_bundle(&self, bodies: Vec<Body>) -> Result<QueuedBundle, Error> {
        let rx = self.queue(|done| Command::Bundle { bodies, done }).await?;
        Ok(QueuedBundle {
            rx,
            handle: self.clone(),
        })
    }

    /// Every flow matching `filter` (`OFPMP_FLOW`).
    pub async fn dump_flows(&self, filter: FlowFilter) -> Result<Vec<FlowStats>, Error> {
        let req = FlowStatsRequest {
            table_id: filter.table_id.unwrap_or(0xff),
            cookie: filter.cookie,
            cookie_mask: filter.cookie_mask,
            ..FlowStatsRequest::default()
        };
        let parts = self.multipart(MultipartBody::FlowRequest(req)).await?;
        let mut flows = Vec::new();
        for body in parts {
            match body {
                MultipartBody::Flow(v) => flows.extend(v),
                other => return Err(unexpected(&other)),
            }
        }
        Ok(flows)
    }

    /// Every group's description (`OFPMP_GROUP_DESC`).
    pub async fn dump_groups(&self) -> Result<Vec<GroupDesc>, Error> {
        self.multipart_list(MultipartBody::GroupDescRequest, |b| match b {
            MultipartBody::GroupDesc(v) => Ok(v),
            other => Err(other),
        })
        .await
    }

    /// Every meter's configuration (`OFPMP_METER_CONFIG` for `OFPM_ALL`, what
    /// `ovs-ofctl dump-meters` shows).
    pub async fn dump_meters(&self) -> Result<Vec<MeterConfig>, Error> {
        self.multipart_list(MultipartBody::MeterConfigRequest(OFPM_ALL), |b| match b {
            MultipartBody::MeterConfig(v) => Ok(v),
            other => Err(other),
        })
        .await
    }

    /// Statistics of meter `meter_id`, or of every meter for `OFPM_ALL` (`OFPMP_METER`, what
    /// `ovs-ofctl meter-stats` shows).
    pub async fn meter_stats(&self, meter_id: u32) -> Result<Vec<MeterStats>, Error> {
        self.multipart_list(MultipartBody::MeterRequest(meter_id), |b| match b {
            MultipartBody::Meter(v) => Ok(v),
            other => Err(other),
        })
        .await
    }

    /// The entries of every reply part to a multipart request, `pick` taking
    /// them out of a part's body (or handing back a body of the wrong type).
    async fn multipart_list<T>(
        &self,
        body: MultipartBody,
        pick: impl Fn(MultipartBody) -> Result<Vec<T>, MultipartBody>,
    ) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        for part in self.multipart(body).await? {
            out.extend(pick(part).map_err(|other| unexpected(&other))?);
        }
        Ok(out)
    }

    /// The bodies of a multipart request's reply parts.
    pub async fn multipart(&self, body: MultipartBody) -> Result<Vec<MultipartBody>, Error> {
        let req = MultipartRequest { flags: 0, body };
        match self.request(Body::MultipartRequest(req)).await? {
            Reply::Multipart(parts) => parts
                .into_iter()
                .map(|m| match m.body {
                    Body::MultipartReply(MultipartReply { body, .. }) => Ok(body),
                    other => Err(unexpected(&other)),
                })
                .collect(),
            other => Err(unexpected(&other)),
        }
    }

    /// Requests a role (`crate::session::role`) with a generation id (OF1.3 §6.3.4). A stale
    /// generation id fails with `OFPRRFC_STALE`.
    pub async fn set_role(&self, role: u32, generation_id: u64) -> Result<Role, Error> {
        match self
            .request(Body::RoleRequest(Role {
                role,
                generation_id,
            }))
            .await?
        {
            Reply::Message(Message {
                body: Body::RoleReply(r),
                ..
            }) => Ok(r),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets which asynchronous messages this connection receives (`OFPT_SET_ASYNC`), and waits
    /// for the switch to have applied it.
    pub async fn set_async(&self, config: AsyncConfig) -> Result<(), Error> {
        self.send(Body::SetAsync(config)).await?;
        self.barrier().await
    }

    /// The asynchronous-message configuration (`OFPT_GET_ASYNC_REQUEST`).
    pub async fn get_async(&self) -> Result<AsyncConfig, Error> {
        match self.request(Body::GetAsyncRequest).await? {
            Reply::Message(Message {
                body: Body::GetAsyncReply(a),
                ..
            }) => Ok(a),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(what: &impl std::fmt::Debug) -> Error {
    let mut s = format!("{what:?}");
    s.truncate(200);
    Error::UnexpectedReply(s)
}

/// A bundle queued with [`SwitchHandle::queue_bundle`]; [`QueuedBundle::applied`] waits for
/// the switch's answer. Dropping it does not withdraw the bundle.
#[must_use = "a queued bundle's outcome is only known by waiting for it"]
pub struct QueuedBundle {
    rx: oneshot::Receiver<Result<Reply, Error>>,
    handle: SwitchHandle,
}

impl QueuedBundle {
    /// Waits until the switch has applied the bundle (or refused it: nothing of it applied).
    pub async fn applied(self) -> Result<(), Error> {
        match self.rx.await {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(self.handle.gone()),
        }
    }
}

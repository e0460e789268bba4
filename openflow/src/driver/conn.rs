//! The task that runs one [`Session`] over one stream.
//!
//! It reads, writes, serves commands and fires timers in one `select!` loop, so a peer that
//! stops reading never blocks timers or reads: the echo timeout still fires and closes the
//! session. Commands are taken only while less than [`DriverConfig::high_water`] bytes wait to
//! be written, which bounds memory and pushes back on callers through the bounded command queue.
//! A peer that keeps talking but stops reading would hold callers there forever, so output that
//! makes no progress for the echo interval plus the echo timeout closes the session too.
//!
//! Written bytes are flushed once the buffer is empty: a TLS stream takes the plaintext and
//! may keep the last records for a later write or flush (tokio-rustls returns as soon as the
//! socket is full), and without the flush they would wait for the next message, an echo
//! request seconds later.

use std::collections::{HashMap, VecDeque};
use std::future::pending;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::handle::{Command, ConnState, SwitchEvent};
use super::{DriverConfig, Error};
use crate::session::{Event, Reply, RoleStatus, SendError, Session, Token};

/// How long a closed session may spend flushing what it queued (e.g. HELLO_FAILED).
const FLUSH_GRACE: Duration = Duration::from_secs(1);
/// Read buffer size once the switch is connected.
const READ_CHUNK: usize = 256 * 1024;
/// Read buffer size during the handshake: a peer that has not sent FEATURES costs little.
const HANDSHAKE_CHUNK: usize = 4 * 1024;

/// Channels shared between the task and its handles.
pub(crate) struct Shared {
    /// The event stream: made once the handshake completes (its buffer is the biggest thing a
    /// connection holds), and handed to [`super::handle::start`] through `events_out`.
    pub(crate) events: Option<broadcast::Sender<SwitchEvent>>,
    pub(crate) event_queue: usize,
    pub(crate) events_out: Option<oneshot::Sender<broadcast::Sender<SwitchEvent>>>,
    pub(crate) state: watch::Sender<ConnState>,
    /// The last `ROLE_STATUS` the switch sent, for whoever only follows the role.
    pub(crate) role: watch::Sender<Option<RoleStatus>>,
}

type Responder = oneshot::Sender<Result<Reply, Error>>;

/// Runs `session` over `stream` until it closes and every handle is told.
pub(crate) async fn run<S>(
    stream: S,
    mut session: Session,
    mut cmds: mpsc::Receiver<Command>,
    mut shared: Shared,
    config: DriverConfig,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut rbuf = vec![0u8; HANDSHAKE_CHUNK];
    // What is being written (`wbuf` from `woff`), then whole buffers behind it: a buffer the
    // session hands over while another is still being written waits as it is, not copied.
    let mut wbuf: Vec<u8> = Vec::new();
    let mut woff = 0usize;
    let mut behind: VecDeque<Vec<u8>> = VecDeque::new();
    let mut behind_len = 0usize;
    // Bytes the stream took that may not have left it yet (see the module docs).
    let mut unflushed = false;
    let mut waiters: HashMap<Token, Responder> = HashMap::new();
    let mut cmds_open = true;
    let mut flush_deadline: Option<tokio::time::Instant> = None;
    let stall_limit = config.session.echo_interval + config.session.echo_timeout;
    let mut write_progress = tokio::time::Instant::now();
    loop {
        if let Some(more) = session.poll_transmit() {
            behind_len += more.len();
            behind.push_back(more);
        }
        // A buffer written whole goes back to the session for its next messages.
        if woff == wbuf.len() && (wbuf.capacity() > 0 || !behind.is_empty()) {
            let next = behind.pop_front().unwrap_or_default();
            behind_len -= next.len();
            session.recycle(std::mem::replace(&mut wbuf, next));
            woff = 0;
        }
        while let Some(ev) = session.poll_event() {
            if matches!(ev, Event::Connected(_)) && rbuf.len() < READ_CHUNK {
                rbuf.resize(READ_CHUNK, 0);
            }
            dispatch(ev, &mut waiters, &mut shared);
        }
        let closed = session.is_closed();
        let unwritten = wbuf.len() - woff + behind_len;
        let to_write = unwritten > 0 || unflushed;
        if !to_write {
            write_progress = tokio::time::Instant::now();
        }
        let stall_at = (to_write && !closed).then_some(write_progress + stall_limit);
        if closed {
            if !to_write {
                break;
            }
            let deadline =
                *flush_deadline.get_or_insert_with(|| tokio::time::Instant::now() + FLUSH_GRACE);
            if tokio::time::Instant::now() >= deadline {
                break;
            }
        }
        let accept = cmds_open && !closed && unwritten < config.high_water;
        let timer = session.poll_timeout();
        let flush = flush_deadline;
        // Nothing more is read while the peer does not read what it made us write (echo
        // replies, answers): memory stays bounded and the peer's own sends block. A peer that
        // never reads again is closed by the write stall. Our own commands stop at
        // `high_water`, so only what the peer makes us answer goes past it: reads stop at
        // twice that, never in normal operation (a switch that stops reading us while it
        // has replies queued for us must still be read, or neither side would move).
        let read = !closed && unwritten < config.high_water.saturating_mul(2);
        tokio::select! {
            r = rd.read(&mut rbuf), if read => match r {
                Ok(0) => session.handle_eof(),
                Ok(n) => session.handle_bytes(&rbuf[..n], Instant::now()),
                Err(e) => session.handle_io_error(read_error(&e)),
            },
            r = write_or_flush(&mut wr, &wbuf[woff..]), if to_write => match r {
                Ok(Some(0)) => {
                    session.handle_io_error("connection refused further writes".to_string());
                    wbuf.clear();
                    woff = 0;
                    behind.clear();
                    behind_len = 0;
                    unflushed = false;
                }
                Ok(Some(n)) => {
                    woff += n;
                    unflushed = true;
                    write_progress = tokio::time::Instant::now();
                }
                Ok(None) => unflushed = false,
                Err(e) => {
                    session.handle_io_error(e.to_string());
                    wbuf.clear();
                    woff = 0;
                    behind.clear();
                    behind_len = 0;
                    unflushed = false;
                }
            },
            c = cmds.recv(), if accept => match c {
                Some(cmd) => apply(cmd, &mut session, &mut waiters),
                None => {
                    cmds_open = false;
                    session.close();
                }
            },
            // While reads are held the peer's silence is ours: the write stall below is what
            // ends a peer that does not read.
            () = sleep_until(timer), if read || closed => session.handle_timeout(Instant::now()),
            () = sleep_until_tokio(flush) => {}
            () = sleep_until_tokio(stall_at) => {
                session.handle_io_error(format!("peer read nothing for {stall_limit:?}"));
            }
        }
    }
    // Drain what is left: the session's events, then commands that raced with the close.
    while let Some(ev) = session.poll_event() {
        dispatch(ev, &mut waiters, &mut shared);
    }
    let reason = match session.phase() {
        crate::session::Phase::Closed(e) => e.clone(),
        _ => crate::session::SessionError::Local,
    };
    cmds.close();
    while let Ok(cmd) = cmds.try_recv() {
        refuse(cmd, &reason);
    }
    let _ = tokio::time::timeout(FLUSH_GRACE, wr.shutdown()).await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => pending().await,
    }
}

async fn sleep_until_tokio(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => pending().await,
    }
}

/// Hands one command to the session.
fn apply(cmd: Command, session: &mut Session, waiters: &mut HashMap<Token, Responder>) {
    let (queued, done) = match cmd {
        Command::Send { bodies, done } => {
            let mut xids = Vec::with_capacity(bodies.len());
            let mut result = Ok(());
            for body in bodies {
                match session.send(body) {
                    Ok(xid) => xids.push(xid),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let _ = done.send(result.map(|()| xids));
            return;
        }
        Command::Request { body, done } => (session.request(body), done),
        Command::Barrier { done } => (session.barrier(), done),
        Command::Bundle { bodies, done } => (session.bundle(bodies), done),
        Command::Close => {
            session.close();
            return;
        }
    };
    match queued {
        Ok(token) => {
            waiters.insert(token, done);
        }
        Err(e) => {
            let _ = done.send(Err(Error::Send(e)));
        }
    }
}

/// Answers a command that arrived after the session closed.
fn refuse(cmd: Command, reason: &crate::session::SessionError) {
    let err = || SendError::Closed(reason.clone());
    match cmd {
        Command::Send { done, .. } => {
            let _ = done.send(Err(err()));
        }
        Command::Request { done, .. }
        | Command::Barrier { done }
        | Command::Bundle { done, .. } => {
            let _ = done.send(Err(Error::Send(err())));
        }
        Command::Close => {}
    }
}

/// Routes one session event to a waiting caller, the event stream or the state.
fn dispatch(ev: Event, waiters: &mut HashMap<Token, Responder>, shared: &mut Shared) {
    // A broadcast without subscribers is fine: nobody asked for events.
    let send = |shared: &Shared, e: SwitchEvent| {
        if let Some(events) = &shared.events {
            let _ = events.send(e);
        }
    };
    match ev {
        Event::Connected(f) => {
            let (events, _) = broadcast::channel(shared.event_queue.max(1));
            if let Some(out) = shared.events_out.take() {
                let _ = out.send(events.clone());
            }
            shared.events = Some(events);
            shared.state.send_replace(ConnState::Connected(f));
            send(
                shared,
                SwitchEvent::Connected {
                    datapath_id: f.datapath_id,
                },
            );
        }
        Event::Done { token, result } => {
            if let Some(done) = waiters.remove(&token) {
                let _ = done.send(result.map_err(Error::Request));
            }
        }
        Event::PacketIn(p) => send(shared, SwitchEvent::PacketIn(p)),
        Event::PortStatus(p) => send(shared, SwitchEvent::PortStatus(p)),
        Event::FlowRemoved(f) => send(shared, SwitchEvent::FlowRemoved(f)),
        Event::RoleStatus(r) => {
            shared.role.send_replace(Some(r));
            send(shared, SwitchEvent::RoleStatus(r))
        }
        Event::Error { xid, error } => send(shared, SwitchEvent::Error { xid, error }),
        Event::Message(m) => send(shared, SwitchEvent::Message(m)),
        Event::Discarded {
            msg_type,
            xid,
            error,
        } => send(
            shared,
            SwitchEvent::Discarded {
                msg_type,
                xid,
                error,
            },
        ),
        Event::Closed(e) => {
            shared
                .state
                .send_replace(ConnState::Disconnected(e.clone()));
            send(shared, SwitchEvent::Disconnected(e));
        }
    }
}

/// Writes some of `buf`, or flushes the stream when `buf` is empty: `Some(bytes written)`, or
/// `None` once flushed. One future for both, as `select!` builds every branch's future.
async fn write_or_flush<W: AsyncWrite + Unpin>(
    wr: &mut W,
    buf: &[u8],
) -> std::io::Result<Option<usize>> {
    if buf.is_empty() {
        wr.flush().await.map(|()| None)
    } else {
        wr.write(buf).await.map(Some)
    }
}

/// What a failed read says. A TLS stream whose peer ends the TCP connection without its
/// `close_notify` (it stopped, was killed or was cut off) fails with `UnexpectedEof`, which
/// rustls words with a link to its manual; a plain stream never does (it reads 0 bytes).
fn read_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "the peer closed the connection without ending TLS (no close_notify): it stopped, \
         was killed or was cut off"
            .to_string()
    } else {
        e.to_string()
    }
}

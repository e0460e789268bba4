//! Helpers shared by the `session_*` tests: sandboxes, flows and drivers.

#![allow(dead_code)] // each test file uses a different subset

use std::time::Duration;

use openflow::Field;
use openflow::action::Action;
use openflow::driver::{self, DriverConfig, Listener, SwitchHandle};
use openflow::instruction::Instruction;
use openflow::msg::{Body, FlowMod};
use openflow::oxm::Match;
use ovs_tests::Sandbox;

/// The bridge every session test uses.
pub const BR: &str = "br-int";

/// A sandbox with one bridge.
pub fn sandbox() -> Sandbox {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    sb.add_bridge(BR)
        .unwrap_or_else(|e| panic!("add bridge: {e}"));
    sb
}

/// `table=0,priority=100,ip,nw_dst=10.X.Y.Z actions=output:1`, distinct for each `n`.
pub fn flow(n: u32) -> FlowMod {
    let match_ = Match::new()
        .with(Field::EthType, 0x0800u16)
        .with(Field::Ipv4Dst, 0x0a00_0000 | (n & 0x00ff_ffff));
    FlowMod {
        priority: 100,
        cookie: 0x5e55,
        match_,
        instructions: vec![Instruction::ApplyActions(vec![Action::output(1)])].into(),
        ..FlowMod::default()
    }
}

/// [`flow`] as a message body.
pub fn flow_body(n: u32) -> Body {
    Body::FlowMod(flow(n))
}

/// The text `ovs-ofctl dump-flows` prints for `flow(n)`'s match.
pub fn flow_text(n: u32) -> String {
    let n = n & 0x00ff_ffff;
    format!("nw_dst=10.{}.{}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff)
}

/// Dials the bridge's management socket (active mode).
pub async fn connect_mgmt(sb: &Sandbox) -> SwitchHandle {
    let target = sb.mgmt_target(BR);
    driver::connect(&target, DriverConfig::default())
        .await
        .unwrap_or_else(|e| panic!("connect {target}: {e}"))
}

/// Listens on a unix socket in the sandbox dir and points the bridge at it (passive mode).
pub async fn listen_as_controller(sb: &Sandbox, name: &str) -> Listener {
    let path = sb.dir().join(format!("run/{name}.sock"));
    let target = format!("punix:{}", path.display());
    let listener = Listener::bind(&target, DriverConfig::default())
        .await
        .unwrap();
    let controller = format!("unix:{}", path.display());
    let sb_ctl = controller.clone();
    run_blocking(sb, move |sb| sb.set_controller(BR, &sb_ctl)).await;
    listener
}

/// Runs a blocking sandbox call off the async worker.
pub async fn run_blocking<T: Send + 'static>(
    sb: &Sandbox,
    f: impl FnOnce(&Sandbox) -> Result<T, ovs_tests::SandboxError> + Send + 'static,
) -> T {
    // Sandbox is not Send-shareable by reference across spawn_blocking; block in place.
    tokio::task::block_in_place(|| f(sb)).unwrap_or_else(|e| panic!("sandbox call: {e}"))
}

/// Waits up to `secs` for `accept`.
pub async fn accept(listener: &mut Listener, secs: u64) -> SwitchHandle {
    tokio::time::timeout(Duration::from_secs(secs), listener.accept())
        .await
        .unwrap_or_else(|_| panic!("no switch connected within {secs} s"))
        .unwrap()
}

/// A scripted switch on the far end of a socket, for behaviour a real OVS will not show.
pub mod fake {
    use openflow::msg::{Body, Features, Hello, Message};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    /// The datapath id fake switches report.
    pub const DPID: u64 = 0xfa_ce00_0000_0001;

    /// Reads one whole message.
    pub async fn read<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Message> {
        let mut header = [0u8; 8];
        s.read_exact(&mut header).await?;
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let mut buf = header.to_vec();
        buf.resize(len.max(8), 0);
        s.read_exact(&mut buf[8..]).await?;
        Message::decode(&buf).map_err(std::io::Error::other)
    }

    /// Writes one message.
    pub async fn write<S: AsyncWrite + Unpin>(s: &mut S, xid: u32, body: Body) {
        let bytes = Message::new(xid, body).encode().unwrap_or_default();
        s.write_all(&bytes)
            .await
            .unwrap_or_else(|e| panic!("fake switch write: {e}"));
    }

    /// Answers HELLO and FEATURES_REQUEST like a switch.
    pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
        let hello = read(s).await.unwrap_or_else(|e| panic!("fake switch: {e}"));
        assert!(matches!(hello.body, Body::Hello(_)), "{hello:?}");
        write(s, 1, Body::Hello(Hello::of13())).await;
        let req = read(s).await.unwrap_or_else(|e| panic!("fake switch: {e}"));
        assert_eq!(req.body, Body::FeaturesRequest);
        let features = Features {
            datapath_id: DPID,
            n_buffers: 0,
            n_tables: 254,
            auxiliary_id: 0,
            capabilities: 0,
            reserved: 0,
        };
        write(s, req.xid, Body::FeaturesReply(features)).await;
    }
}

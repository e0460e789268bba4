//! Port descriptions (OF1.3 §7.2.1 `struct ofp_port`) and `OFPT_PORT_STATUS`
//! (OF1.3 §7.4.3).

use std::fmt;

use super::fixed::FixedStr;
use crate::error::DecodeError;
use crate::text;
use crate::wire::{Reader, Writer};

/// `struct ofp_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortDesc {
    /// Port number.
    pub port_no: u32,
    /// Hardware address.
    pub hw_addr: [u8; 6],
    /// Name (up to 16 bytes, NUL padded).
    pub name: FixedStr,
    /// `OFPPC_*`.
    pub config: u32,
    /// `OFPPS_*`.
    pub state: u32,
    /// Current features.
    pub curr: u32,
    /// Advertised features.
    pub advertised: u32,
    /// Supported features.
    pub supported: u32,
    /// Peer's features.
    pub peer: u32,
    /// Current speed, kbps.
    pub curr_speed: u32,
    /// Maximum speed, kbps.
    pub max_speed: u32,
}

impl PortDesc {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.port_no);
        w.zeros(4);
        w.bytes(&self.hw_addr);
        w.zeros(2);
        self.name.write(w, 16);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            w.u32(v);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let port_no = r.u32()?;
        r.pad(4, "ofp_port")?;
        let hw_addr = r.array()?;
        r.pad(2, "ofp_port")?;
        let name = FixedStr::read(r, 16)?;
        Ok(PortDesc {
            port_no,
            hw_addr,
            name,
            config: r.u32()?,
            state: r.u32()?,
            curr: r.u32()?,
            advertised: r.u32()?,
            supported: r.u32()?,
            peer: r.u32()?,
            curr_speed: r.u32()?,
            max_speed: r.u32()?,
        })
    }
}

/// `OFPPF_*` names as OVS prints them.
pub(crate) fn port_features(f: u32) -> String {
    let names = [
        "10MB-HD",
        "10MB-FD",
        "100MB-HD",
        "100MB-FD",
        "1GB-HD",
        "1GB-FD",
        "10GB-FD",
        "40GB-FD",
        "100GB-FD",
        "1TB-FD",
        "OTHER",
        "COPPER",
        "FIBER",
        "AUTO_NEG",
        "AUTO_PAUSE",
        "AUTO_PAUSE_ASYM",
    ];
    let v: Vec<&str> = (0..16)
        .filter(|b| f & (1 << b) != 0)
        .filter_map(|b| names.get(b).copied())
        .collect();
    v.join(" ")
}

impl fmt::Display for PortDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut b = [0u8; 16];
        b[10..].copy_from_slice(&self.hw_addr);
        write!(
            f,
            " {}({}): addr:{}",
            text::port32(self.port_no),
            self.name,
            text::eth(u128::from_be_bytes(b))
        )?;
        write!(
            f,
            "\n     config:     {}",
            super::basic::port_config_names(self.config)
        )?;
        let state = match self.state & 7 {
            0 => "0".to_string(),
            s => {
                let names = [(1, "LINK_DOWN"), (2, "BLOCKED"), (4, "LIVE")];
                names
                    .iter()
                    .filter(|(b, _)| s & b != 0)
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        write!(f, "\n     state:      {state}")?;
        if self.curr != 0 {
            write!(f, "\n     current:    {}", port_features(self.curr))?;
        }
        if self.advertised != 0 {
            write!(f, "\n     advertised: {}", port_features(self.advertised))?;
        }
        if self.supported != 0 {
            write!(f, "\n     supported:  {}", port_features(self.supported))?;
        }
        if self.peer != 0 {
            write!(f, "\n     peer:       {}", port_features(self.peer))?;
        }
        write!(
            f,
            "\n     speed: {} Mbps now, {} Mbps max",
            self.curr_speed / 1000,
            self.max_speed / 1000
        )
    }
}

/// `OFPT_PORT_STATUS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStatus {
    /// `OFPPR_*`: 0 add, 1 delete, 2 modify.
    pub reason: u8,
    /// The port.
    pub desc: PortDesc,
}

impl PortStatus {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u8(self.reason);
        w.zeros(7);
        self.desc.encode(w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let reason = r.u8()?;
        r.pad(7, "ofp_port_status")?;
        Ok(PortStatus {
            reason,
            desc: PortDesc::decode(r)?,
        })
    }
}

impl fmt::Display for PortStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = match self.reason {
            0 => "ADD".to_string(),
            1 => "DEL".to_string(),
            2 => "MOD".to_string(),
            r => r.to_string(),
        };
        write!(f, " {r}:{}", self.desc)
    }
}

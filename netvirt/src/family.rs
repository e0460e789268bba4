//! IP families: IPv4 and IPv6, and the OpenFlow fields each uses. Pure.

use std::borrow::Borrow;
use std::fmt;
use std::net::IpAddr;

use openflow::Field;

/// An IP family: the flows of each are alike but for their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Both, IPv4 first.
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];

    /// The family of `ip`.
    pub fn of(ip: impl Borrow<IpAddr>) -> Family {
        match ip.borrow() {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The family of `net`.
    pub fn of_net(net: &ipnet::IpNet) -> Family {
        match net {
            ipnet::IpNet::V4(_) => Family::V4,
            ipnet::IpNet::V6(_) => Family::V6,
        }
    }

    /// Its `eth_type`.
    pub fn eth_type(self) -> u16 {
        match self {
            Family::V4 => 0x0800,
            Family::V6 => 0x86dd,
        }
    }

    /// Its source-address field.
    pub fn src(self) -> Field {
        match self {
            Family::V4 => Field::Ipv4Src,
            Family::V6 => Field::Ipv6Src,
        }
    }

    /// Its destination-address field.
    pub fn dst(self) -> Field {
        match self {
            Family::V4 => Field::Ipv4Dst,
            Family::V6 => Field::Ipv6Dst,
        }
    }

    /// Its address width in bits.
    pub fn bits(self) -> u16 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The suffix of a service port's group name for this family: none for IPv4, which keeps
    /// the names (and so the ids) of single-stack IPv4 services as they were.
    pub fn suffix(self) -> &'static str {
        match self {
            Family::V4 => "",
            Family::V6 => "/ipv6",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// An address as a match or set-field value.
pub fn addr_value(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

//! The tables, registers, zones and cookies of svcflow's pipeline on `br-int`.
//! `docs/pipeline.md` walks through it table by table.

/// Tables, in the order a packet visits them.
pub mod table {
    /// Classify by ingress port: pod (load its ELAN), gateway port, or uplink.
    pub const CLASSIFIER: u8 = 0;
    /// Answer ARP (virtual gateway, node and service addresses); flood other non-IP frames
    /// in the ELAN.
    pub const ARP: u8 = 10;
    /// Finish a neighbour advertisement table 10 built from a solicitation: its target
    /// link-layer address (a field a flow matching a solicitation may not set).
    pub const ND_ANSWER: u8 = 11;
    /// Flood within the ingress port's ELAN (its namespace's L2 segment): frames that are not
    /// routed (not IP, not answered ARP) and IPv6 link-local and multicast traffic.
    pub const ELAN_FLOOD: u8 = 12;
    /// Un-SNAT hairpin replies (addressed to the virtual loopback IP).
    pub const UNSNAT: u8 = 20;
    /// Track every IP packet in the service zone, un-DNATing replies.
    pub const CONNTRACK: u8 = 21;
    /// Dispatch on connection state: new connections go to service selection.
    pub const CT_STATE: u8 = 30;
    /// New connections to a service address go to the service's select group; all other new
    /// connections are committed as they are.
    pub const SERVICE: u8 = 40;
    /// One flow per endpoint: DNAT to it and commit.
    pub const ENDPOINT: u8 = 41;
    /// A big service's slot ranges, each to one of its chained groups (`chain.rs`).
    pub const CHAIN: u8 = 42;
    /// Session affinity: flows learned from table 44, each remembering one client's endpoint
    /// of one service port (by `reg5`); a hit loads the endpoint into `reg3`/`reg4`.
    pub const AFFINITY: u8 = 43;
    /// Session affinity: a remembered (or just chosen) endpoint that still serves the service
    /// port is learned again and DNATed; otherwise the service port's group chooses one.
    pub const AFFINITY_LEARN: u8 = 44;
    /// SNAT a pod reaching itself through a service to the virtual loopback IP.
    pub const HAIRPIN: u8 = 45;
    /// Route by destination IP: rewrite MACs, decrement TTL, choose the output port.
    pub const L3: u8 = 50;
    /// The MACs the switch learned from the ARP of pods whose MAC no input gave (one flow
    /// per pod address, learned by the classifier; table 50 resubmits here).
    pub const LEARNED_MAC: u8 = 51;
    /// Output to the chosen port (also back out of the ingress port, for hairpin).
    pub const OUTPUT: u8 = 60;
}

/// Registers: each named bit field the pipeline keeps in a register, as Antrea's `RegField`
/// does. [`reg::LAYOUT`] lists them; `netvirt/tests/registers.rs` fails if two overlap, or if
/// a flow of any golden scenario uses register bits that no field of the layout names.
pub mod reg {
    use openflow::Field;

    /// Bits `lo..=hi` of register `reg`, named for what they hold.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RegField {
        /// What the bits hold.
        pub name: &'static str,
        /// The register.
        pub reg: Field,
        /// The lowest bit.
        pub lo: u8,
        /// The highest bit.
        pub hi: u8,
    }

    impl RegField {
        /// All 32 bits of `reg`.
        pub const fn whole(name: &'static str, reg: Field) -> Self {
            RegField {
                name,
                reg,
                lo: 0,
                hi: 31,
            }
        }
    }

    /// Where the packet came from: 1 the uplink, 2 the tunnel ([`FROM_TUNNEL`]), 0 a local
    /// port.
    pub const SOURCE: RegField = RegField::whole("source: 1 uplink, 2 tunnel", Field::Reg0);
    /// A big service's slot, chosen by `multipath`, which writes its low 16 bits; the slot
    /// ranges of table 42 match the whole register (its upper bits stay 0).
    pub const SLOT: RegField = RegField::whole("a big service's slot", Field::Reg1);
    /// Scratch space for the ARP responder's address swap.
    pub const SWAP: RegField = RegField::whole("ARP address swap", Field::Reg2);
    /// The chosen endpoint's IPv4 address, set by a group bucket.
    pub const ENDPOINT_ADDR: RegField = RegField::whole("endpoint IPv4 address", Field::Reg3);
    /// The chosen endpoint's port, set by a group bucket.
    pub const ENDPOINT_L4: RegField = RegField::whole("endpoint port", Field::Reg4);
    /// The service port's id (its group id): a big service's slot ranges (table 42) and
    /// session affinity (tables 43 and 44) key on it.
    pub const SERVICE_PORT: RegField = RegField::whole("service port id", Field::Reg5);
    /// The ingress port's ELAN.
    pub const ELAN_ID: RegField = RegField::whole("ELAN id", Field::Reg6);
    /// The output port chosen by L3 forwarding.
    pub const OUTPUT: RegField = RegField::whole("output port", Field::Reg7);

    /// The chosen IPv6 endpoint's address, set by a group bucket: `xxreg3`, which is `reg12`
    /// (its most significant 32 bits) through `reg15`. An IPv6 address needs 128 bits, so it
    /// takes registers of its own rather than overlapping [`ENDPOINT_ADDR`] and its
    /// neighbours.
    pub const ENDPOINT_IP6: [RegField; 4] = [
        RegField::whole("endpoint IPv6 address, bits 127..96", Field::Reg12),
        RegField::whole("endpoint IPv6 address, bits 95..64", Field::Reg13),
        RegField::whole("endpoint IPv6 address, bits 63..32", Field::Reg14),
        RegField::whole("endpoint IPv6 address, bits 31..0", Field::Reg15),
    ];

    /// Every register field of the pipeline.
    pub const LAYOUT: [RegField; 12] = [
        SOURCE,
        SLOT,
        SWAP,
        ENDPOINT_ADDR,
        ENDPOINT_L4,
        SERVICE_PORT,
        ELAN_ID,
        OUTPUT,
        ENDPOINT_IP6[0],
        ENDPOINT_IP6[1],
        ENDPOINT_IP6[2],
        ENDPOINT_IP6[3],
    ];

    // The fields that fill their register, as the register itself, for matches and loads.

    /// [`SOURCE`]'s register.
    pub const FROM_UPLINK: Field = SOURCE.reg;
    /// The value of [`SOURCE`] for a packet from the tunnel.
    pub const FROM_TUNNEL: u32 = 2;
    /// [`SWAP`]'s register.
    pub const SCRATCH: Field = SWAP.reg;
    /// [`ENDPOINT_ADDR`]'s register.
    pub const ENDPOINT_IP: Field = ENDPOINT_ADDR.reg;
    /// [`ENDPOINT_L4`]'s register.
    pub const ENDPOINT_PORT: Field = ENDPOINT_L4.reg;
    /// [`ELAN_ID`]'s register.
    pub const ELAN: Field = ELAN_ID.reg;
    /// [`OUTPUT`]'s register.
    pub const OUT_PORT: Field = OUTPUT.reg;
    /// [`SLOT`]'s register (its bits are [`SLOT`]'s).
    pub const CHAIN_SLOT: Field = SLOT.reg;
    /// [`SERVICE_PORT`]'s register.
    pub const SERVICE_ID: Field = SERVICE_PORT.reg;
}

/// `ct_state` bits (`lib/packets.h` `CS_*`).
pub mod ct_state {
    /// `+new`.
    pub const NEW: u32 = 0x01;
    /// `+est`.
    pub const EST: u32 = 0x02;
    /// `+rel`.
    pub const REL: u32 = 0x04;
    /// `+rpl`: the packet goes in the reply direction.
    pub const RPL: u32 = 0x08;
    /// `+inv`.
    pub const INV: u32 = 0x10;
    /// `+trk`.
    pub const TRK: u32 = 0x20;
    /// `+dnat`: the packet's destination was translated.
    pub const DNAT: u32 = 0x80;
}

/// Cookies: the top 16 bits mark svcflow's flows; the next 8 bits say what the flow is for,
/// and the low 32 bits which object (a service port's group id, an ELAN, …).
pub mod cookie {
    /// svcflow's mark, "SV".
    pub const MARK: u64 = 0x5356 << 48;
    /// The mask that selects svcflow's flows.
    pub const MARK_MASK: u64 = 0xffff << 48;
    /// The fixed skeleton of the pipeline.
    pub const SKELETON: u8 = 0;
    /// A pod's port.
    pub const POD: u8 = 1;
    /// A service port; the low bits are its group id.
    pub const SERVICE: u8 = 2;
    /// An endpoint's DNAT.
    pub const ENDPOINT: u8 = 3;
    /// An ELAN's flood.
    pub const ELAN: u8 = 4;
    /// The node's own ports and addresses (gateway port, uplink).
    pub const NODE: u8 = 5;
    /// The service CIDR's refusal of new connections no service port takes.
    pub const REFUSE: u8 = 6;
    /// A health-check node port's probes, answered by the controller
    /// (`crate::health_answer`); the low bits are the port.
    pub const HEALTH: u8 = 7;

    /// Flows learned for session affinity (table 43) carry this mark instead of svcflow's, so
    /// that the agent, which owns every flow under [`MARK`], never deletes what the switch
    /// learned; the low 32 bits are the service port's id.
    pub const LEARNED_MARK: u64 = 0x5341 << 48;

    /// The cookie of the flows learned for service port `id`.
    pub const fn learned(id: u32) -> u64 {
        LEARNED_MARK | id as u64
    }

    /// The cookie of the MAC learned for the pod on OpenFlow port `ofport` (table 51).
    pub const fn learned_mac(ofport: u32) -> u64 {
        LEARNED_MARK | (1 << 40) | ofport as u64
    }

    /// The kind of a cookie that carries svcflow's mark.
    pub const fn kind_of(cookie: u64) -> Option<u8> {
        if cookie & MARK_MASK == MARK {
            Some((cookie >> 40) as u8)
        } else {
            None
        }
    }

    /// The cookie of a flow of `kind` for object `id`.
    pub const fn make(kind: u8, id: u32) -> u64 {
        MARK | ((kind as u64) << 40) | id as u64
    }

    /// The object of a cookie [`make`] made.
    pub const fn id_of(cookie: u64) -> u32 {
        cookie as u32
    }
}

/// Group id spaces: service ports take ids below 2^31; ELAN flood groups have the top bit set.
pub mod group {
    /// The largest service group id.
    pub const SERVICE_MAX: u32 = 0x7fff_ffff;
    /// ELAN flood groups are `ELAN_BASE | elan`: every local port of the ELAN, the gateway
    /// port, and (with the overlay) the tunnel to each other node that has pods of it.
    pub const ELAN_BASE: u32 = 0x8000_0000;
    /// `ELAN_LOCAL_BASE | elan` floods only the local ports and the gateway port: for what
    /// came out of the tunnel, which its sender flooded to every node already.
    pub const ELAN_LOCAL_BASE: u32 = 0xc000_0000;
    /// The largest ELAN id.
    pub const ELAN_MAX: u32 = 0x00ff_ffff;
}

/// Meter ids.
pub mod meter {
    /// Rate-limits the packets the refusal path sends to the controller: its `controller()`
    /// actions name this meter, which the engine installs before any flow (`crate::meter`).
    pub const REFUSE: u32 = 1;
}

/// The controller `userdata` that asks svcflow to refuse the packet's connection.
pub const REJECT_USERDATA: &[u8] = b"svcflow-reject";

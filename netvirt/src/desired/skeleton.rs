//! The pipeline's fixed flows: every table's default, conntrack, the service CIDR's refusal
//! and the output table.

use super::*;

impl Builder<'_> {
    pub(super) fn skeleton(&mut self) {
        let c = cookie::make(cookie::SKELETON, 0);
        let cfg = self.config;
        self.flow(table::CLASSIFIER, 0, Match::new(), c, vec![]);
        // ARP: proxy-answer every request from a local port with the gateway MAC, so all IP
        // traffic is routed by the L3 table; IP goes on to conntrack; the rest is dropped
        // unless an ELAN flood below takes it.
        self.flow(
            table::ARP,
            100,
            arp_request(),
            c,
            apply(arp_proxy_reply(cfg.gateway_mac)),
        );
        // Neighbour discovery, IPv6's ARP: the same proxy answer to every solicitation of a
        // routable address. IPv6 link-local and multicast traffic stays on the namespace's L2
        // segment, its ELAN, as non-IP frames do: duplicate address detection (from `::`),
        // solicitations of link-local addresses, link-local unicast, MLD, router
        // solicitations.
        self.flow(
            table::ARP,
            100,
            nd_solicit(),
            c,
            nd_reply(cfg.gateway_mac, NA_ROUTER),
        );
        // An advertisement table 10 built: its target link-layer address is its source MAC.
        let advert = ip_of(Family::V6)
            .with(Field::IpProto, 58u8)
            .with(Field::Icmpv6Type, 136u8)
            .with(Field::Icmpv6Code, 0u8);
        self.flow(
            table::ND_ANSWER,
            100,
            advert,
            c,
            apply(vec![
                moved(Field::EthSrc, Field::NdTll),
                output(OFPP_IN_PORT),
            ]),
        );
        let flood = || vec![goto(table::ELAN_FLOOD)];
        let dad = nd_solicit().with(Field::Ipv6Src, 0u128);
        self.flow(table::ARP, 110, dad, c, flood());
        let link_local: ipnet::IpNet =
            ipnet::Ipv6Net::new(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10)
                .map(ipnet::IpNet::V6)
                .unwrap_or_default();
        let multicast: ipnet::IpNet =
            ipnet::Ipv6Net::new(std::net::Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8)
                .map(ipnet::IpNet::V6)
                .unwrap_or_default();
        self.flow(
            table::ARP,
            105,
            with_net(nd_solicit(), Field::NdTarget, link_local),
            c,
            flood(),
        );
        for net in [link_local, multicast] {
            self.flow(table::ARP, 60, to_net(net), c, flood());
        }
        for family in Family::BOTH {
            self.flow(table::ARP, 50, ip_of(family), c, vec![goto(table::UNSNAT)]);
        }
        // Everything else (not IP, and ARP no flow above answered) floods the ELAN.
        self.flow(table::ARP, 10, Match::new(), c, flood());
        self.flow(table::ELAN_FLOOD, 0, Match::new(), c, vec![]);
        // Hairpin replies are un-SNATed in their own zone before anything else.
        for loopback in [IpAddr::V4(cfg.loopback_ip), IpAddr::V6(cfg.loopback_ip6)] {
            self.flow(
                table::UNSNAT,
                100,
                to_addr(loopback),
                c,
                apply(vec![ct(
                    cfg.hairpin_zone,
                    table::CONNTRACK,
                    false,
                    Some(Nat::default()),
                )]),
            );
        }
        self.flow(
            table::UNSNAT,
            0,
            Match::new(),
            c,
            vec![goto(table::CONNTRACK)],
        );
        for family in Family::BOTH {
            self.flow(
                table::CONNTRACK,
                0,
                ip_of(family),
                c,
                apply(vec![ct(
                    cfg.service_zone,
                    table::CT_STATE,
                    false,
                    Some(Nat::default()),
                )]),
            );
        }
        self.flow(
            table::CT_STATE,
            200,
            ct_match(ct_state::INV | ct_state::TRK, ct_state::INV | ct_state::TRK),
            c,
            vec![],
        );
        self.flow(
            table::CT_STATE,
            100,
            ct_match(ct_state::NEW | ct_state::TRK, ct_state::NEW | ct_state::TRK),
            c,
            vec![goto(table::SERVICE)],
        );
        self.flow(
            table::CT_STATE,
            0,
            Match::new(),
            c,
            vec![goto(table::HAIRPIN)],
        );
        // Every other new connection is committed, so its replies are +est, not +inv.
        for family in Family::BOTH {
            self.flow(
                table::SERVICE,
                0,
                ip_of(family),
                c,
                apply(vec![ct(cfg.service_zone, table::HAIRPIN, true, None)]),
            );
        }
        // Except in the service CIDR: a new connection there that no service port takes (an
        // address no service owns, or a port a service address does not serve) is refused at
        // once, as kube-proxy's nftables mode refuses it, instead of leaving by the uplink to
        // time out. (A /0 "CIDR" would refuse everything; it is not one.)
        let refuse = cookie::make(cookie::REFUSE, 0);
        let cidrs = [ipnet::IpNet::V4(cfg.service_cidr)]
            .into_iter()
            .chain(cfg.service_cidr6.map(ipnet::IpNet::V6));
        for cidr in cidrs.filter(|c| c.prefix_len() > 0) {
            let family = Family::of_net(&cidr);
            for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
                let m = with_net(l4_of(family, protocol), family.dst(), cidr);
                self.flow(table::SERVICE, 1, m, refuse, apply(vec![reject_action()]));
            }
        }
        self.flow(table::HAIRPIN, 0, Match::new(), c, vec![goto(table::L3)]);
        // Clearing in_port lets hairpin traffic leave by the port it came in on.
        self.flow(
            table::OUTPUT,
            0,
            Match::new(),
            c,
            apply(vec![
                Action::RegLoad {
                    dst: Subfield::whole(Field::InPort),
                    value: 0,
                },
                // `ovs-ofctl` parses `output:REG` with max_len 65535 (it prints no max_len),
                // so the same flow loaded from text compares equal.
                Action::OutputReg {
                    src: Subfield::whole(reg::OUT_PORT),
                    max_len: u16::MAX,
                },
            ]),
        );
    }
}

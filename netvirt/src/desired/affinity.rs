//! Session affinity (ClientIP): tables 43 and 44, learned flows per client.

use super::*;

impl Builder<'_> {
    /// Session affinity for one service port (tables 43 and 44), given the actions that
    /// choose an endpoint without it (`select`); returns the actions of its table-40 flows:
    /// note the service port in `reg5`, look the client up in table 43 (a hit loads the
    /// remembered endpoint into `reg3`/`reg4`), then go on in table 44.
    ///
    /// In table 44 an endpoint that still serves the port (one flow per backend) is learned
    /// into table 43 again, which restarts its idle timeout, and DNATed in table 41; anything
    /// else (no remembered endpoint, or one that no longer serves) goes to `select`, whose
    /// buckets come back to table 44 with their choice.
    #[allow(clippy::too_many_arguments)] // one service port's parts, as its callers hold them
    pub(super) fn affinity(
        &mut self,
        name: &str,
        id: u32,
        c: u64,
        family: Family,
        timeout_seconds: u32,
        groups: &[ServiceGroup],
        select: Vec<Action>,
    ) -> Vec<Action> {
        let idle_timeout = affinity_idle_timeout(timeout_seconds);
        if timeout_seconds > u32::from(u16::MAX) {
            self.out.conflicts.push(format!(
                "{name}: session affinity timeout {timeout_seconds} s is above Open vSwitch's \
                 {} s; clamped to {idle_timeout} s",
                u16::MAX
            ));
        }
        let learn = affinity_learn(id, idle_timeout, family);
        for g in groups {
            for b in &g.backends {
                // The family: the learned flow matches the client's source address, whose
                // prerequisite the learning flow must match too.
                let m = with_endpoint(ip_of(family), b.ip)
                    .with(reg::ENDPOINT_PORT, u32::from(b.port))
                    .with(reg::SERVICE_ID, id);
                self.flow(
                    table::AFFINITY_LEARN,
                    200,
                    m,
                    c,
                    apply(vec![learn.clone(), resubmit(table::ENDPOINT)]),
                );
            }
        }
        self.flow(
            table::AFFINITY_LEARN,
            100,
            Match::new().with(reg::SERVICE_ID, id),
            c,
            apply(select),
        );
        // An explicit miss in table 43 (below the learned flows) for this service port, so a
        // client seen for the first time never takes the switch's table-miss path.
        self.flow(
            table::AFFINITY,
            0,
            Match::new().with(reg::SERVICE_ID, id),
            c,
            vec![],
        );
        vec![
            set(reg::SERVICE_ID, id),
            resubmit(table::AFFINITY),
            resubmit(table::AFFINITY_LEARN),
        ]
    }
}

/// The idle timeout of a learned affinity flow: the service's timeout, clamped to the 16 bits
/// Open vSwitch has (65,535 s; Kubernetes allows up to 86,400 s).
pub fn affinity_idle_timeout(timeout_seconds: u32) -> u16 {
    u16::try_from(timeout_seconds.max(1)).unwrap_or(u16::MAX)
}

/// The priority of flows learned into table 43 (all alike: they never overlap).
pub(super) const AFFINITY_PRIORITY: u16 = 100;

/// `learn` into table 43: for this service port (`reg5`) and this client (its source address
/// of `family`), load the chosen endpoint (`reg3`, or `reg12`..`reg15` for IPv6, and `reg4`).
/// `delete_learned` removes a service port's learned flows with its last table-44 flow.
pub(super) fn affinity_learn(id: u32, idle_timeout: u16, family: Family) -> Action {
    let whole = Subfield::whole;
    let mut specs = vec![
        learn_family(family),
        learn_spec(32, reg::SERVICE_ID, LearnDst::Match(whole(reg::SERVICE_ID))),
        learn_spec(
            family.bits(),
            family.src(),
            LearnDst::Match(whole(family.src())),
        ),
    ];
    let endpoint: Vec<Field> = match family {
        Family::V4 => vec![reg::ENDPOINT_IP],
        Family::V6 => reg::ENDPOINT_IP6.iter().map(|f| f.reg).collect(),
    };
    specs.extend(
        endpoint
            .into_iter()
            .chain([reg::ENDPOINT_PORT])
            .map(|r| learn_spec(32, r, LearnDst::Load(whole(r)))),
    );
    Action::Learn(Learn {
        idle_timeout,
        priority: AFFINITY_PRIORITY,
        cookie: cookie::learned(id),
        flags: NX_LEARN_F_DELETE_LEARNED,
        table_id: table::AFFINITY,
        specs,
        ..Learn::default()
    })
}

/// A `learn` spec: the learned flow matches `family` (`eth_type=0x800` or `0x86dd`).
pub(super) fn learn_family(family: Family) -> LearnSpec {
    LearnSpec {
        n_bits: 16,
        src: LearnSrc::Imm(family.eth_type().to_be_bytes().to_vec()),
        dst: LearnDst::Match(Subfield::whole(Field::EthType)),
    }
}

/// A `learn` spec from the whole field `src` (`n_bits` wide) of the packet that learns.
pub(super) fn learn_spec(n_bits: u16, src: Field, dst: LearnDst) -> LearnSpec {
    LearnSpec {
        n_bits,
        src: LearnSrc::Field(Subfield::whole(src)),
        dst,
    }
}

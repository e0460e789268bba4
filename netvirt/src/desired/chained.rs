//! Big services: a multipath slot over chained select groups (table 42).

use super::*;

impl Builder<'_> {
    /// The slot-range flows of a big service port split over `groups`, and the actions of
    /// its table-40 flows after `reg5` is set: hash the connection into a slot, then look the
    /// slot up.
    pub(super) fn chain(
        &mut self,
        name: &str,
        id: u32,
        c: u64,
        groups: &[ServiceGroup],
    ) -> Vec<Action> {
        let weights: Vec<u64> = groups
            .iter()
            .map(|g| g.backends.iter().map(|b| u64::from(b.weight)).sum())
            .collect();
        let slots = chain::slots(&weights);
        if !slots.exact {
            self.out.conflicts.push(format!(
                "{name}: total endpoint weight above {}; weights across its {} groups are \
                 approximated",
                chain::SLOTS_MAX,
                groups.len()
            ));
        }
        for (g, ranges) in groups.iter().zip(&slots.ranges) {
            for &(value, mask) in ranges {
                let m = Match::new().with(reg::SERVICE_ID, id);
                let m = if mask == u32::MAX {
                    m.with(reg::CHAIN_SLOT, value)
                } else {
                    m.with_masked(reg::CHAIN_SLOT, value, mask)
                };
                self.flow(table::CHAIN, 100, m, c, apply(vec![Action::Group(g.id)]));
            }
        }
        vec![
            Action::Multipath(Multipath {
                fields: NX_HASH_FIELDS_SYMMETRIC_L4,
                basis: chain::MULTIPATH_BASIS,
                algorithm: NX_MP_ALG_MODULO_N,
                max_link: (slots.n_links - 1) as u16,
                arg: 0,
                dst: Subfield::range(reg::CHAIN_SLOT, 0, 15),
            }),
            resubmit(table::CHAIN),
        ]
    }
}

/// `NX_HASH_FIELDS_SYMMETRIC_L4` (`include/openflow/nicira-ext.h`).
pub(super) const NX_HASH_FIELDS_SYMMETRIC_L4: u16 = 1;

/// `NX_MP_ALG_MODULO_N` (`include/openflow/nicira-ext.h`).
pub(super) const NX_MP_ALG_MODULO_N: u16 = 0;

//! Where each address is in a service's list of endpoints, for the two translations (REST and
//! Kubernetes) that serve an address once however often it is listed.
//!
//! A short list is searched (most services have a few endpoints); past [`SEARCHED`] the
//! positions go into a hash map, since searching made a service of 20,000 endpoints cost
//! 0.27 s to translate (`docs/performance.md`).
//!
//! Pure: no I/O.

use std::collections::HashMap;
use std::net::IpAddr;

use netvirt::model::Endpoint;

/// Lists up to this long are searched.
const SEARCHED: usize = 32;

/// The positions of a list's addresses; the list grows only through [`AddressIndex::push`].
#[derive(Default)]
pub(crate) struct AddressIndex(Option<HashMap<IpAddr, usize>>);

impl AddressIndex {
    /// Where `ip` is in `list`.
    pub(crate) fn find(&mut self, list: &[Endpoint], ip: IpAddr) -> Option<usize> {
        if self.0.is_none() && list.len() > SEARCHED {
            self.0 = Some(
                list.iter()
                    .enumerate()
                    .map(|(k, e)| (e.address, k))
                    .collect(),
            );
        }
        match &self.0 {
            Some(at) => at.get(&ip).copied(),
            None => list.iter().position(|e| e.address == ip),
        }
    }

    /// Appends `e` to `list`.
    pub(crate) fn push(&mut self, list: &mut Vec<Endpoint>, e: Endpoint) {
        if let Some(at) = &mut self.0 {
            at.insert(e.address, list.len());
        }
        list.push(e);
    }
}

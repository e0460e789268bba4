//! OpenFlow roles on one switch connection (OF1.3 §6.3.4): the fence between replicas.
//!
//! A replica that holds a node's lock asks its switch for MASTER with the node's epoch from
//! the shared database as the generation id ([`claim_master`]). The switch refuses a
//! generation id older than the last one it accepted (`OFPRRFC_STALE`), and makes every other
//! master a slave, whose writes it then refuses (`OFPBRC_IS_SLAVE`): a replica that lost its
//! lock while frozen cannot write once the new master has claimed the switch, whatever it
//! still believes. Replicas that do not master a switch make themselves slaves on it
//! ([`become_slave`]): a new connection starts as EQUAL, which may write.

use openflow::driver::{Error, SwitchHandle};
use openflow::session::{RequestError, role};

/// What the switch says about this connection: its role, and the generation id in force
/// (None while no controller has set one).
pub(crate) async fn current(switch: &SwitchHandle) -> Result<(u32, Option<u64>), Error> {
    let r = switch.set_role(role::NOCHANGE, 0).await?;
    // OVS answers UINT64_MAX while no generation id is defined.
    Ok((
        r.role,
        (r.generation_id != u64::MAX).then_some(r.generation_id),
    ))
}

/// Why a claim failed.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// The switch has accepted a newer generation id than our epoch: this one.
    Stale(Option<u64>),
    /// The switch refused for another reason, or did not answer.
    Failed(String),
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::Stale(Some(g)) => {
                write!(
                    f,
                    "the switch has a newer generation id ({g}): OFPRRFC_STALE"
                )
            }
            ClaimError::Stale(None) => f.write_str("the switch refused the generation id as stale"),
            ClaimError::Failed(e) => write!(f, "{e}"),
        }
    }
}

fn is_stale(e: &Error) -> bool {
    matches!(e, Error::Request(RequestError::Refused(m)) if m.name() == Some("OFPRRFC_STALE"))
}

/// Asks for MASTER with generation id `epoch`.
pub(crate) async fn claim_master(switch: &SwitchHandle, epoch: u64) -> Result<(), ClaimError> {
    match switch.set_role(role::MASTER, epoch).await {
        Ok(r) if r.role == role::MASTER => Ok(()),
        Ok(r) => Err(ClaimError::Failed(format!(
            "the switch answered role {} to a master request",
            r.role
        ))),
        Err(e) if is_stale(&e) => Err(ClaimError::Stale(
            current(switch).await.ok().and_then(|(_, g)| g),
        )),
        Err(e) => Err(ClaimError::Failed(e.to_string())),
    }
}

/// Makes this connection a slave: read-only, no packet-ins. The generation id sent is the one
/// in force (a slave request must not be older), re-read if a master moved it meanwhile.
pub(crate) async fn become_slave(switch: &SwitchHandle) -> Result<(), Error> {
    let mut tries = 0;
    loop {
        let (_, generation) = current(switch).await?;
        match switch.set_role(role::SLAVE, generation.unwrap_or(0)).await {
            Err(e) if is_stale(&e) && tries < 5 => tries += 1,
            r => return r.map(|_| ()),
        }
    }
}

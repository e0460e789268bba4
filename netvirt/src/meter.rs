//! The node's meters: the refusal meter's configuration, and making sure the switch holds it
//! before any flow that uses it is sent.
//!
//! The `controller()` action of the refusal path (a service port without endpoints, and the
//! service CIDR's catch-all) names meter [`meter::REFUSE`]: PKTPS, one DROP band at
//! [`Config::refuse_rate`] packets/s with a burst of [`Config::refuse_burst`] packets. A flood
//! of connection attempts to a dead service then reaches the controller at that rate at most;
//! the switch drops the rest and counts them in the band's statistics
//! (`ovs-ofctl -O OpenFlow13 meter-stats br-int`).

use openflow::driver::{Error, SwitchHandle};
use openflow::instruction::Instruction;
use openflow::session::RequestError;
use openflow::{
    Action,
    msg::{
        Body, MeterBand, MeterConfig, MeterMod, MeterModCommand, OFPMF_BURST, OFPMF_PKTPS,
        OFPMF_STATS,
    },
};

use crate::agent::SwitchState;
use crate::config::Config;
use crate::flow::FlowEntry;
use crate::pipeline::meter;

/// `OFPET_METER_MOD_FAILED`.
const OFPET_METER_MOD_FAILED: u16 = 12;
/// `OFPMMFC_METER_EXISTS`.
const OFPMMFC_METER_EXISTS: u16 = 1;

/// The refusal meter as `config` wants it.
pub fn refuse_meter(config: &Config) -> MeterConfig {
    MeterConfig {
        meter_id: meter::REFUSE,
        flags: OFPMF_PKTPS | OFPMF_BURST | OFPMF_STATS,
        bands: vec![MeterBand::drop(config.refuse_rate, config.refuse_burst)],
    }
}

/// What [`ensure`] did to a meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterChange {
    /// The switch held it as wanted.
    Unchanged,
    /// It was missing and was added.
    Added,
    /// The switch held it with another configuration, which was replaced.
    Modified,
}

/// Makes the switch hold `want`: reads its meters (`dump-meters`), then adds the meter if it
/// is missing or modifies it if it differs, and waits for the switch to confirm. An add that
/// races with another controller's and fails with `OFPMMFC_METER_EXISTS` becomes a modify.
pub async fn ensure(switch: &SwitchHandle, want: &MeterConfig) -> Result<MeterChange, Error> {
    let have = switch.dump_meters().await?;
    let command = match have.iter().find(|m| m.meter_id == want.meter_id) {
        Some(m) if m == want => return Ok(MeterChange::Unchanged),
        Some(_) => MeterModCommand::Modify,
        None => MeterModCommand::Add,
    };
    match apply(switch, command, want).await {
        Err(e) if command == MeterModCommand::Add && exists(&e) => {
            apply(switch, MeterModCommand::Modify, want).await?;
            Ok(MeterChange::Modified)
        }
        Err(e) => Err(e),
        Ok(()) if command == MeterModCommand::Add => Ok(MeterChange::Added),
        Ok(()) => Ok(MeterChange::Modified),
    }
}

/// Sends one meter mod and waits for the barrier that confirms it.
async fn apply(
    switch: &SwitchHandle,
    command: MeterModCommand,
    meter: &MeterConfig,
) -> Result<(), Error> {
    switch
        .send(Body::MeterMod(MeterMod {
            command,
            meter: meter.clone(),
        }))
        .await?;
    switch.barrier().await
}

/// Whether a flow's `controller()` actions name meter `meter_id`.
pub fn names_meter(flow: &FlowEntry, meter_id: u32) -> bool {
    flow.instructions().iter().any(|i| match i {
        Instruction::ApplyActions(actions) | Instruction::WriteActions(actions) => actions
            .iter()
            .any(|a| matches!(a, Action::Controller(c) if c.meter_id == Some(meter_id))),
        _ => false,
    })
}

/// Marks the flows of `actual` (what the switch holds) that name meter `meter_id` as out of
/// date, so that a full sync's plan rewrites them (or deletes those no longer wanted). For a
/// meter that was just added: OVS binds a `controller()` action to its meter when the flow is
/// added or modified (`ofproto_fix_controller_action()`), so a flow installed while the meter
/// was missing stays unmetered until it is written again.
pub fn outdate_flows_naming(actual: &mut SwitchState, meter_id: u32) {
    actual
        .flows
        .values_mut()
        .filter(|f| names_meter(f, meter_id))
        .for_each(|f| *f = FlowEntry::new(f.cookie, Vec::new()));
}

/// Whether the switch refused a meter mod because the meter exists.
fn exists(e: &Error) -> bool {
    matches!(e, Error::Request(RequestError::SendsFailed(failures))
    if failures.iter().any(|f| {
        f.error.err_type == OFPET_METER_MOD_FAILED && f.error.code == OFPMMFC_METER_EXISTS
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_meter_follows_the_config() {
        let config = Config {
            refuse_rate: 50,
            refuse_burst: 20,
            ..Config::default()
        };
        let m = refuse_meter(&config);
        assert_eq!(m.meter_id, meter::REFUSE);
        assert_eq!(m.flags, OFPMF_PKTPS | OFPMF_BURST | OFPMF_STATS);
        assert_eq!(m.bands, vec![MeterBand::drop(50, 20)]);
        // As `ovs-ofctl dump-meters` prints it.
        let text = openflow::Message::new(
            1,
            Body::MeterMod(MeterMod {
                command: MeterModCommand::Add,
                meter: m,
            }),
        )
        .to_string();
        assert_eq!(
            text,
            "OFPT_METER_MOD (OF1.3) (xid=0x1): ADD meter=1 pktps burst stats bands=\n\
             type=drop rate=50 burst_size=20"
        );
    }

    /// Only flows whose `controller()` names the meter are marked out of date.
    #[test]
    fn flows_naming_the_meter_are_outdated() {
        use crate::flow::FlowKey;
        use openflow::action::Controller;
        let controller = |meter_id| Controller {
            max_len: u16::MAX,
            controller_id: 0,
            reason: 1,
            userdata: vec![],
            pause: false,
            meter_id,
            legacy: false,
        };
        let flow = |priority, actions| {
            (
                FlowKey::new(40, priority, &openflow::Match::new()),
                FlowEntry::new(0, vec![Instruction::ApplyActions(actions)]),
            )
        };
        let mut actual = SwitchState::default();
        for (key, entry) in [
            flow(1, vec![Action::Controller(controller(Some(meter::REFUSE)))]),
            flow(2, vec![Action::Controller(controller(None))]),
            flow(3, vec![Action::Controller(controller(Some(7)))]),
            flow(4, vec![Action::Group(1)]),
        ] {
            actual.flows.insert(key, entry);
        }
        outdate_flows_naming(&mut actual, meter::REFUSE);
        let cleared: Vec<u16> = actual
            .flows
            .iter()
            .filter(|(_, f)| f.is_drop())
            .map(|(k, _)| k.priority)
            .collect();
        assert_eq!(cleared, vec![1]);
    }
}

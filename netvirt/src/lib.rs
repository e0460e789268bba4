//! Services to desired OpenFlow state: model, desired flows and groups, plan and apply.

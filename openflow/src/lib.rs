//! OpenFlow 1.3 codec with the Open vSwitch (Nicira and ONF) extensions, and the switch session.

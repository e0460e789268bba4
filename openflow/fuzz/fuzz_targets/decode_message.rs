//! Fuzzes the message decoder: it must never panic, and anything it accepts
//! must re-encode to the same bytes and print without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openflow::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Message::decode(data) {
        let _ = msg.to_string();
        let again = msg.encode().expect("a decoded message is never oversize");
        let msg2 = Message::decode(&again).expect("our own encoding decodes");
        assert_eq!(msg, msg2, "decode -> encode -> decode is stable");
    }
});

//! Any bytes as a manifest (servers read them from disk and from clients staging a write):
//! parsing and every check must not panic, and what parses must write back and parse the
//! same.
#![no_main]

use ganges_proto::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = serde_json::from_slice::<Manifest>(data) else { return };
    let _ = m.layout.validate();
    if let Some(p) = &m.placement {
        let _ = p.validate(&m.shape);
    }
    if let Some(o) = &m.origin {
        let _ = o.validate(&m.shape);
    }
    let text = serde_json::to_vec(&m).expect("a manifest serialises");
    let again: Manifest = serde_json::from_slice(&text).expect("our own manifest parses");
    assert_eq!(serde_json::to_vec(&again).expect("serialises"), text);
});

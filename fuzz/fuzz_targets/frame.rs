//! Any bytes as a frame: the header is parsed and checked, the body decoded as the message
//! its kind names. Nothing may panic; what decodes must encode to a frame that decodes to
//! the same encoding again.
#![no_main]

use bytes::Bytes;
use ganges_proto::frame::{FrameHeader, HEADER_BYTES};
use ganges_proto::msg::Message;
use libfuzzer_sys::fuzz_target;

fn frame_of(m: &Message, request_id: u64) -> Vec<u8> {
    let e = m.encode(request_id);
    let mut out = e.head.to_vec();
    out.extend_from_slice(&e.payload);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<HEADER_BYTES>() else { return };
    let Ok(header) = FrameHeader::parse(head) else { return };
    // The reader takes exactly the length the header says.
    let Some(body) = body.get(..header.body_len) else { return };
    let Ok(msg) = Message::decode(&header, Bytes::copy_from_slice(body)) else { return };
    let frame = frame_of(&msg, header.request_id);
    let (h2, b2) = frame.split_first_chunk::<HEADER_BYTES>().expect("a whole header");
    let h2 = FrameHeader::parse(h2).expect("our own header parses");
    assert_eq!(h2.body_len, b2.len(), "the header says the body's length");
    let again = Message::decode(&h2, Bytes::copy_from_slice(b2)).expect("our own frame decodes");
    assert_eq!(frame_of(&again, h2.request_id), frame, "encoding is stable");
});

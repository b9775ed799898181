//! A request frame as the broker reads it: length prefix, header, shape
//! check, body decode, and the record batches of a Produce request. Nothing
//! may panic, and no allocation may exceed libFuzzer's -malloc_limit_mb
//! (an allocation sized from an untrusted count would).

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::codec;
use protocol::frame::{request_frame_length, LENGTH_PREFIX_BYTES};
use protocol::kafka_protocol::messages::RequestKind;

/// The broker's limit for non-produce frames (broker/src/limits.rs).
const FRAME_BYTES_MAX: usize = 8 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((prefix, rest)) = data.split_first_chunk::<LENGTH_PREFIX_BYTES>() else {
        return;
    };
    let Ok(length) = request_frame_length(*prefix, FRAME_BYTES_MAX) else {
        return;
    };
    // A short read ends the connection in the broker; decode what came.
    let frame = Bytes::copy_from_slice(&rest[..length.min(rest.len())]);
    let Ok(request) = codec::decode_header(frame) else {
        return;
    };
    let Ok(body) = codec::decode_body(&request) else {
        return;
    };
    if let RequestKind::Produce(produce) = body {
        for topic in produce.topic_data {
            for partition in topic.partition_data {
                if let Some(records) = partition.records {
                    walk_batches(records);
                }
            }
        }
    }
});

fn walk_batches(records: Bytes) {
    for batch in protocol::batch::split_batches(records) {
        let Ok(batch) = batch else { return };
        let _ = protocol::batch::validate(batch.bytes());
        if let Ok(records) = batch.records() {
            for record in records {
                if record.is_err() {
                    break;
                }
            }
        }
    }
}

//! ListOffsets answers as Kafka's: by timestamp, the first record at or
//! after it with that record's own timestamp; MAX_TIMESTAMP, the record
//! holding the largest timestamp (KAFKA-16310), also inside compressed
//! batches. Through confluent-kafka's `AdminClient.list_offsets`.

mod common;

use std::time::Duration;

use common::{run_python, Broker};

#[test]
fn list_offsets_answers_the_found_records_offset_and_timestamp() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.bootstrap();
    let out = run_python(
        "list_offsets_check.py",
        &[&bootstrap],
        Duration::from_secs(180),
    );
    for codec in ["none", "lz4", "zstd"] {
        assert!(out.contains(&format!("{codec}: ok")), "{out}");
    }
}

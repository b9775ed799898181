//! Cost of validating a producer's batch on the produce path: the header
//! and CRC check alone (what the broker did before it walked records) and
//! the full validation (header, CRC and every record, decompressing lz4),
//! next to a memcpy of the same bytes measured in the same run.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{self, Compression};
use protocol::records;

/// `count` records of `value_len` patterned bytes and a short key.
fn records_of(count: usize, value_len: usize) -> Vec<NewRecord> {
    (0..count)
        .map(|i| NewRecord {
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(build::pattern(i as u64, value_len)),
            headers: Vec::new(),
            timestamp_delta: i as i64,
        })
        .collect()
}

/// Values of repeated text: lz4 compresses them about 4x, like JSON logs.
fn text_records(count: usize, value_len: usize) -> Vec<NewRecord> {
    let line = b"{\"level\":\"info\",\"service\":\"checkout\",\"msg\":\"order placed\",\"id\":";
    (0..count)
        .map(|i| {
            let mut value = Vec::with_capacity(value_len);
            while value.len() < value_len {
                value.extend_from_slice(line);
                value.extend_from_slice(format!("{}}}\n", i * 7919 + value.len()).as_bytes());
            }
            value.truncate(value_len);
            NewRecord {
                key: None,
                value: Some(value),
                headers: Vec::new(),
                timestamp_delta: i as i64,
            }
        })
        .collect()
}

fn validation(c: &mut Criterion) {
    let cases = [
        ("1MiB_1KB_records", build::batch(0, &records_of(1000, 1024))),
        (
            "128KiB_100B_records",
            build::batch(0, &records_of(1180, 100)),
        ),
        (
            "lz4_1000_1KB_text_records",
            build::compressed(Compression::Lz4, 0, &text_records(1000, 1024)),
        ),
    ];
    let mut group = c.benchmark_group("produce_validation");
    let mut scratch = Vec::new();
    for (name, bytes) in &cases {
        eprintln!("{name}: {} bytes on the wire", bytes.len());
        // Throughput in wire bytes of the batch.
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("{name}/memcpy"), |b| {
            let mut dst = vec![0u8; bytes.len()];
            b.iter(|| dst.copy_from_slice(black_box(bytes)))
        });
        group.bench_function(format!("{name}/header_and_crc"), |b| {
            b.iter(|| batch::validate(black_box(bytes)).unwrap())
        });
        group.bench_function(format!("{name}/full"), |b| {
            b.iter(|| {
                let header = batch::validate(black_box(bytes)).unwrap();
                records::validate_producer_batch(bytes, &header, 64 << 20, &mut scratch).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, validation);
criterion_main!(benches);

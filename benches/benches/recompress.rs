//! Cost of recompressing a producer's batch on the broker
//! (`protocol::recompress::recompress`, a topic's `compression.type` other
//! than `producer`): per target codec at its default level, from an
//! uncompressed batch (compression alone) and from an lz4 batch
//! (decompression and compression). Throughput is in uncompressed record
//! bytes, the figure to set against what one core receives.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{self, Compression};
use protocol::recompress::{self, Codec};

/// Values of repeated JSON-like text, as logs and events are: about 4x
/// compressible by lz4.
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
                key: Some(format!("order-{i}").into_bytes()),
                value: Some(value),
                headers: Vec::new(),
                timestamp_delta: i as i64,
            }
        })
        .collect()
}

fn recompression(c: &mut Criterion) {
    let records = text_records(1000, 1024);
    let (body, _) = build::records_body(&records);
    let sources = [
        (
            "from_none",
            build::compressed(Compression::None, 0, &records),
        ),
        ("from_lz4", build::compressed(Compression::Lz4, 0, &records)),
    ];
    let targets = [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ];
    let mut group = c.benchmark_group("recompression");
    group.throughput(Throughput::Bytes(body.len() as u64));
    for (source, bytes) in &sources {
        let header = batch::validate(bytes).unwrap();
        for (target, compression) in targets {
            if compression == header.compression() {
                continue;
            }
            let codec = Codec {
                compression,
                level: None,
            };
            let out = recompress::recompress(bytes, &header, codec, 64 << 20)
                .unwrap()
                .expect("another codec");
            eprintln!(
                "{source} -> {target}: {} record bytes, {} -> {} wire bytes",
                body.len(),
                bytes.len(),
                out.len()
            );
            group.bench_function(format!("{source}/to_{target}"), |b| {
                b.iter(|| {
                    recompress::recompress(black_box(bytes), &header, codec, 64 << 20).unwrap()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, recompression);
criterion_main!(benches);

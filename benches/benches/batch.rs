//! Micro-benchmarks of the hot paths the storage crate owns: batch
//! validation with CRC-32C, offset rewriting, sparse index lookup.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use protocol::batch::{self, build};
use storage::index::{OffsetEntry, OffsetIndex};

fn batch_validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch");
    for (name, count, value_len) in [("16KiB", 16, 1000), ("1MiB", 1, 1 << 20)] {
        let bytes = build::patterned(1_700_000_000_000, count, value_len, 3);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("validate_{name}"), |b| {
            b.iter(|| batch::validate(black_box(&bytes)).unwrap())
        });
        let mut owned = bytes.clone();
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("assign_offset_{name}"), |b| {
            let mut offset = 0i64;
            b.iter(|| {
                offset += 1;
                batch::set_base_offset(black_box(&mut owned), offset);
                batch::set_partition_leader_epoch(&mut owned, 3);
            })
        });
    }
    group.finish();
}

fn index_lookup(c: &mut Criterion) {
    // A full 1 GiB segment's index: one entry per 4 KiB.
    let mut index = OffsetIndex::default();
    for i in 0..(1u32 << 18) {
        index.push(OffsetEntry {
            relative_offset: i * 10 + 9,
            position: i * 4096,
        });
    }
    let mut target = 0u32;
    c.bench_function("index_lookup_262144_entries", |b| {
        b.iter(|| {
            target = target.wrapping_add(7919) % (1 << 21);
            black_box(index.lookup(black_box(target)))
        })
    });
}

criterion_group!(benches, batch_validation, index_lookup);
criterion_main!(benches);

//! The metadata files of a data dir, and a partition's producer-state
//! snapshots, as `strom log dump` reads them: a single node's metadata log
//! (`__metadata/metadata.log`), a cluster member's Raft store
//! (`__metadata/raft/`: `raft-entries.log`, `raft-hard-state`,
//! `raft-snapshot` with the metadata image in it), a metadata image
//! snapshot on its own, and `<offset>.snapshot`. Each is read whole (they
//! are small) and decoded by the code the broker reads it with; a frame
//! that does not decode is reported with its byte position and the dump
//! goes on at the next frame that does.

use std::path::Path;

use broker::metadata::{MetadataImage, MetadataRecord};
use replication::file_store;
use replication::quorum::VoterChange;
use replication::{Entry, EntryType};

use super::output::{Line, Printer};

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn problem(printer: &mut Printer, position: usize, reason: String) {
    printer.problem(
        Line::new("problem")
            .num("position", position)
            .reason(reason),
    );
}

/// The variant's name of a metadata record (`TopicCreated`).
fn record_type(record: &MetadataRecord) -> String {
    let debug = format!("{record:?}");
    let end = debug.find(['(', ' ', '{']).unwrap_or(debug.len());
    debug[..end].to_string()
}

fn record_line(line: Line, record: &MetadataRecord) -> Line {
    line.word("record_type", record_type(record))
        .detail("record", format!("{record:?}"))
}

/// Reads frames from `position` on with `frame_at` (a frame's value and
/// the position after it, or why none is there), printing each with
/// `print`; a damaged frame is reported and the dump goes on at the next
/// position where a frame decodes. Returns the frames read.
fn each_frame<T>(
    bytes: &[u8],
    printer: &mut Printer,
    frame_at: impl Fn(&[u8], usize) -> Result<(T, usize), String>,
    mut print: impl FnMut(&mut Printer, usize, usize, T),
) -> usize {
    let mut frames = 0;
    let mut position = 0usize;
    while position < bytes.len() {
        match frame_at(bytes, position) {
            Ok((value, next)) => {
                print(printer, position, next - position, value);
                frames += 1;
                position = next;
            }
            Err(reason) => {
                let next_valid = (position + 1..bytes.len()).find(|&q| frame_at(bytes, q).is_ok());
                match next_valid {
                    Some(next) => {
                        problem(
                            printer,
                            position,
                            format!(
                                "{reason}; {} bytes skipped: the next valid frame starts at byte \
                                 {next}",
                                next - position
                            ),
                        );
                        position = next;
                    }
                    None => {
                        problem(
                            printer,
                            position,
                            format!(
                                "{reason}; no valid frame in the {} bytes to the end of the file \
                                 (a torn write at the end is cut by the broker at start)",
                                bytes.len() - position
                            ),
                        );
                        break;
                    }
                }
            }
        }
    }
    frames
}

/// A single node's metadata log: `len u32 | crc32 u32 | record` frames.
pub fn dump_metadata_log(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    let problems_before = printer.problems();
    printer.line(
        Line::new("metadata_log")
            .text("path", &path.display().to_string())
            .num("bytes", bytes.len()),
    );
    let records = each_frame(
        &bytes,
        printer,
        broker::metadata::record_at,
        |printer, position, size, record| {
            let line = Line::new("metadata_record")
                .num("position", position)
                .num("bytes", size);
            printer.line(record_line(line, &record));
        },
    );
    printer.line(
        Line::new("summary")
            .num("records", records)
            .num("problems", printer.problems() - problems_before),
    );
    Ok(())
}

/// A cluster member's Raft entries file: each entry with its index and
/// term and the metadata records (or voter change) it carries.
pub fn dump_raft_entries(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    let problems_before = printer.problems();
    printer.line(
        Line::new("raft_entries")
            .text("path", &path.display().to_string())
            .num("bytes", bytes.len()),
    );
    let mut last_index: Option<u64> = None;
    let mut first_index: Option<u64> = None;
    let entries = each_frame(
        &bytes,
        printer,
        file_store::entry_at,
        |printer, position, size, entry: Entry| {
            // An entry at or below one before it replaces it and those
            // after it: a conflicting tail written again.
            let replaces = last_index.is_some_and(|last| entry.index <= last);
            last_index = Some(entry.index);
            first_index.get_or_insert(entry.index);
            print_entry(printer, position, size, &entry, replaces);
        },
    );
    printer.line(
        Line::new("summary")
            .num("entries", entries)
            .maybe_num("first_index", first_index)
            .maybe_num("last_index", last_index)
            .num("problems", printer.problems() - problems_before),
    );
    Ok(())
}

fn print_entry(printer: &mut Printer, position: usize, size: usize, entry: &Entry, replaces: bool) {
    let mut line = Line::new("raft_entry")
        .num("position", position)
        .num("bytes", size)
        .num("index", entry.index)
        .num("term", entry.term);
    if replaces {
        line = line.flag("replaces_earlier", true);
    }
    match entry.get_entry_type() {
        EntryType::EntryNormal if entry.data.is_empty() => {
            // What a new leader appends first.
            printer.line(line.word("entry_type", "normal").num("records", 0u32));
        }
        EntryType::EntryNormal => match broker::cluster::wire::decode_records(&entry.data) {
            Ok(records) => {
                printer.line(
                    line.word("entry_type", "normal")
                        .num("records", records.len()),
                );
                for record in &records {
                    printer.line(record_line(Line::indented("metadata_record"), record));
                }
            }
            Err(reason) => {
                printer.line(line.word("entry_type", "normal"));
                problem(
                    printer,
                    position,
                    format!(
                        "the records of entry {} do not decode: {reason}",
                        entry.index
                    ),
                );
            }
        },
        EntryType::EntryConfChange => match VoterChange::decode(&entry.data) {
            Ok((change, context)) => printer.line(
                line.word("entry_type", "conf_change")
                    .word("change", format!("{change:?}"))
                    .data("context", Some(&context)),
            ),
            Err(reason) => {
                printer.line(line.word("entry_type", "conf_change"));
                problem(
                    printer,
                    position,
                    format!(
                        "the voter change of entry {} does not decode: {reason}",
                        entry.index
                    ),
                );
            }
        },
        EntryType::EntryConfChangeV2 => printer.line(
            line.word("entry_type", "conf_change_v2")
                .num("data_bytes", entry.data.len()),
        ),
    }
}

/// A Raft store's hard state: the term, the vote and the commit index.
pub fn dump_hard_state(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    match file_store::hard_state_of(&bytes) {
        Ok(hard_state) => printer.line(
            Line::new("raft_hard_state")
                .text("path", &path.display().to_string())
                .num("term", hard_state.term)
                .num("vote", hard_state.vote)
                .num("commit", hard_state.commit),
        ),
        Err(reason) => problem(printer, 0, format!("no hard state: {reason}")),
    }
    Ok(())
}

/// A Raft store's snapshot: its index, term and voters, and the metadata
/// image it holds.
pub fn dump_raft_snapshot(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    let snapshot = match file_store::snapshot_of(&bytes) {
        Ok(snapshot) => snapshot,
        Err(reason) => {
            problem(printer, 0, format!("no snapshot: {reason}"));
            return Ok(());
        }
    };
    let metadata = snapshot.get_metadata();
    let conf_state = metadata.get_conf_state();
    printer.line(
        Line::new("raft_snapshot")
            .text("path", &path.display().to_string())
            .num("index", metadata.index)
            .num("term", metadata.term)
            .list("voters", &conf_state.voters)
            .list("learners", &conf_state.learners)
            .num("data_bytes", snapshot.data.len()),
    );
    match broker::metadata::decode_snapshot(&snapshot.data, -1) {
        Ok(image) => print_image(printer, &image),
        Err(reason) => problem(
            printer,
            0,
            format!("the snapshot's metadata image does not decode: {reason}"),
        ),
    }
    Ok(())
}

/// A metadata image snapshot on its own (`STRMIMG` magic).
pub fn dump_image(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    printer.line(
        Line::new("image_snapshot")
            .text("path", &path.display().to_string())
            .num("bytes", bytes.len()),
    );
    match broker::metadata::decode_snapshot(&bytes, -1) {
        Ok(image) => print_image(printer, &image),
        Err(reason) => problem(printer, 0, reason),
    }
    Ok(())
}

fn configs_field(line: Line, configs: &std::collections::BTreeMap<String, String>) -> Line {
    let text = configs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let json = configs
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    line.custom(
        "configs",
        format!("{{{text}}}"),
        serde_json::Value::Object(json),
    )
}

/// The image: its brokers, topics with each partition's replicas, leader,
/// epochs and ISR, and the dynamic configs.
pub fn print_image(printer: &mut Printer, image: &MetadataImage) {
    printer.line(
        Line::new("image")
            .num("offset", image.offset)
            .text("cluster_id", &image.cluster_id)
            .num("producer_ids_end", image.producer_ids_end)
            .num("topics", image.topics.len())
            .num("brokers", image.brokers.len()),
    );
    for broker in image.brokers.values() {
        let line = Line::indented("broker")
            .num("id", broker.id)
            .num("incarnation", broker.incarnation)
            .text("host", &broker.host)
            .num("port", broker.port);
        let line = match &broker.rack {
            Some(rack) => line.text("rack", rack),
            None => line.word("rack", "null"),
        };
        printer.line(
            line.text("controller_address", &broker.controller_address)
                .flag("fenced", broker.fenced),
        );
    }
    for topic in image.topics.values() {
        let line = Line::indented("topic")
            .text("name", &topic.name)
            .word("id", format!("{:032x}", topic.topic_id))
            .num("partitions", topic.partition_cores.len());
        printer.line(configs_field(line, &topic.configs));
        for (index, state) in topic.partitions.iter().enumerate() {
            printer.line(
                Line::indented("partition")
                    .text("topic", &topic.name)
                    .num("index", index)
                    .maybe_num("core", topic.partition_cores.get(index).copied())
                    .list("replicas", &state.replicas)
                    .num("leader", state.leader)
                    .num("leader_epoch", state.leader_epoch)
                    .list("isr", &state.isr)
                    .num("partition_epoch", state.partition_epoch)
                    .list("adding", &state.adding)
                    .list("removing", &state.removing),
            );
        }
    }
    for (resource, configs) in &image.broker_configs {
        let line = Line::indented("broker_configs").text("resource", resource);
        printer.line(configs_field(line, configs));
    }
    for (group, configs) in &image.group_configs {
        let line = Line::indented("group_configs").text("group", group);
        printer.line(configs_field(line, configs));
    }
}

/// A partition's producer-state snapshot: each producer's epoch, last
/// sequence and last append time at the snapshot's offset.
pub fn dump_producer_snapshot(path: &Path, printer: &mut Printer) -> Result<(), String> {
    let bytes = read(path)?;
    let named = super::segment::base_offset_of(path);
    match broker::producer_state::ProducerTable::decode_snapshot(&bytes) {
        Ok((offset, table)) => {
            printer.line(
                Line::new("producer_snapshot")
                    .text("path", &path.display().to_string())
                    .num("offset", offset)
                    .num("producers", table.len()),
            );
            if let Some(named) = named.filter(|&named| named != offset) {
                problem(
                    printer,
                    0,
                    format!(
                        "the file's name says offset {named}, the snapshot holds offset {offset}: \
                         the broker does not trust it"
                    ),
                );
            }
            for view in table.views() {
                printer.line(
                    Line::indented("producer")
                        .num("producer_id", view.producer_id)
                        .num("epoch", view.epoch)
                        .num("last_sequence", view.last_sequence)
                        .num("last_timestamp", view.last_timestamp_ms),
                );
            }
        }
        Err(error) => problem(printer, 0, format!("no producer state snapshot: {error}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_types_are_the_variant_names() {
        assert_eq!(
            record_type(&MetadataRecord::ClusterId("c".into())),
            "ClusterId"
        );
        assert_eq!(
            record_type(&MetadataRecord::TopicDeleted { name: "t".into() }),
            "TopicDeleted"
        );
        assert_eq!(
            record_type(&MetadataRecord::ProducerIdsAllocated { end: 9 }),
            "ProducerIdsAllocated"
        );
    }

    /// Frames of `len u32 | crc32 u32 | payload`, big-endian, as a single
    /// node's metadata log writes them.
    fn frames(records: &[MetadataRecord]) -> Vec<u8> {
        let mut out = Vec::new();
        for record in records {
            let payload = record.encode();
            out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            out.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
            out.extend_from_slice(&payload);
        }
        out
    }

    #[test]
    fn a_damaged_frame_is_skipped_to_the_next_valid_one() {
        let records = [
            MetadataRecord::ClusterId("cluster".into()),
            MetadataRecord::TopicDeleted {
                name: "gone".into(),
            },
            MetadataRecord::ProducerIdsAllocated { end: 1000 },
        ];
        let mut bytes = frames(&records);
        let second = frames(&records[..1]).len();
        bytes[second + 9] ^= 0x20;
        let mut printer = Printer::sink();
        let mut seen = Vec::new();
        let read = each_frame(
            &bytes,
            &mut printer,
            broker::metadata::record_at,
            |_, position, _, record| seen.push((position, record)),
        );
        assert_eq!(read, 2);
        assert_eq!(printer.problems(), 1);
        assert_eq!(seen[0].1, records[0]);
        assert_eq!(seen[1].1, records[2]);
        // A torn end: one problem, nothing after it.
        let whole = frames(&records);
        let mut printer = Printer::sink();
        let read = each_frame(
            &whole[..whole.len() - 3],
            &mut printer,
            broker::metadata::record_at,
            |_, _, _, _| {},
        );
        assert_eq!((read, printer.problems()), (2, 1));
    }
}

//! `strom transaction list | describe | describe-producers | abort`
//! against real brokers, with a transaction left open by confluent-kafka's
//! transactional producer (`tests/clients/txn_cli_check.py`): the tools
//! show it field by field, `/metrics` shows it open and the partitions'
//! last stable offset held back, and `abort` ends it on each partition as
//! KIP-664 does, after which read_committed consumers read past it (its
//! records never, the records after it byte for byte). An operator's
//! WriteTxnMarkers that does not abort an open transaction of a known
//! producer at its epoch is refused and writes nothing; the coordinators'
//! own markers to other brokers still pass; the coordinators count what
//! they commit, abort and time out.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::admin::Admin;
use common::{poll_until, raw, run_python, strom, strom_at, strom_fails, strom_ok, Broker};
use protocol::kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use protocol::kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;

const SCRIPT: &str = "txn_cli_check.py";
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
/// How long a figure may take to show in `/metrics` or a listing.
const SHOW_DEADLINE: Duration = Duration::from_secs(60);
const TXN_ID: &str = "txn-cli-held";
const TOPIC: &str = "held";
const PARTITIONS: i32 = 2;
/// Records the open transaction writes to each partition, after
/// [`BEFORE`] plain ones.
const OPEN_RECORDS: usize = 5;
const BEFORE: usize = 3;
const AFTER: usize = 4;
/// A transaction's timeout of 10 minutes, so that within a test only the
/// tool ends it; the broker's maximum is raised above it.
const BROKER_ARGS: &[&str] = &[
    "--set",
    "transaction.max.timeout.ms=1200000",
    "--set",
    "strom.metrics.partition.labels=true",
];

/// (key, value) in hex, per partition, as the script wrote them.
type Written = BTreeMap<i32, Vec<(String, String)>>;
/// (offset, key, value in hex), per partition, as a consumer read them.
type Read = BTreeMap<i32, Vec<(i64, String, String)>>;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs a case of the script; its JSON answer.
fn script(bootstrap: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec![bootstrap];
    all.extend_from_slice(args);
    let out = run_python(SCRIPT, &all, SCRIPT_DEADLINE);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{SCRIPT} {args:?} printed {out:?}: {e}"))
}

/// A JSON object of partition → records (arrays) as a map, each record
/// taken by `record`.
fn by_partition<R>(
    value: &serde_json::Value,
    record: impl Fn(&serde_json::Value) -> R,
) -> BTreeMap<i32, Vec<R>> {
    value
        .as_object()
        .unwrap()
        .iter()
        .map(|(partition, records)| {
            let records = records.as_array().unwrap().iter().map(&record).collect();
            (partition.parse().unwrap(), records)
        })
        .collect()
}

fn text(value: &serde_json::Value) -> String {
    value.as_str().unwrap().to_string()
}

fn written(value: &serde_json::Value) -> Written {
    by_partition(value, |r| (text(&r[0]), text(&r[1])))
}

fn read(bootstrap: &str, topic: &str, partitions: i32, isolation: &str) -> Read {
    let value = script(
        bootstrap,
        &["read", topic, &partitions.to_string(), isolation],
    );
    by_partition(&value, |r| {
        (r[0].as_i64().unwrap(), text(&r[1]), text(&r[2]))
    })
}

/// The records read, without their offsets; checks that the offsets grow.
fn payloads(read: &[(i64, String, String)]) -> Vec<(String, String)> {
    assert!(
        read.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets out of order: {read:?}"
    );
    read.iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Each partition's log end offset, from `strom topic describe`.
fn end_offsets(bootstrap: &str, topic: &str) -> BTreeMap<i32, i64> {
    let output = strom_at(Some(bootstrap), &["topic", "describe", topic], None);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let field = |line: &str, name: &str| -> i64 {
        line.split('\t')
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .parse()
            .unwrap()
    };
    text.lines()
        .filter(|l| l.contains("Partition: "))
        .map(|l| (field(l, "Partition: ") as i32, field(l, "EndOffset: ")))
        .collect()
}

/// The fields of the one row under a tool's header line.
fn row(output: &str, header: &str) -> Vec<String> {
    let mut lines = output.lines();
    assert_eq!(lines.next(), Some(header), "{output}");
    let row: Vec<String> = lines
        .next()
        .unwrap_or_else(|| panic!("no row: {output}"))
        .split('\t')
        .map(str::to_string)
        .collect();
    assert_eq!(lines.next(), None, "more than one row: {output}");
    row
}

const LIST_HEADER: &str = "TransactionalId\tCoordinator\tProducerId\tTransactionState";
const DESCRIBE_HEADER: &str = "CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\tCurrentTransactionTimeoutMs\tCurrentTransactionStartTimeMs\tTransactionDurationMs\tTopicPartitions";
const PRODUCERS_HEADER: &str = "ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\tLastTimestamp\tCurrentTransactionStartOffset";

/// `/metrics` as text.
fn metrics(admin: &Admin) -> String {
    let (code, body) = admin.get("/metrics");
    assert_eq!(code, 200, "{body}");
    body
}

/// Every sample of `name` with its labels text and value.
fn samples(body: &str, name: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (sample, value) = l.rsplit_once(' ')?;
            let labels = sample.strip_prefix(name)?;
            (labels.is_empty() || labels.starts_with('{'))
                .then(|| (labels.to_string(), value.parse().unwrap()))
        })
        .collect()
}

/// The value of `name{labels}` exactly.
fn sample(body: &str, name: &str, labels: &str) -> Option<f64> {
    samples(body, name)
        .into_iter()
        .find(|(l, _)| l == labels)
        .map(|(_, v)| v)
}

/// The sum of `name` over its samples.
fn sum(body: &str, name: &str) -> f64 {
    samples(body, name).iter().map(|(_, v)| v).sum()
}

fn lso_lag(body: &str, topic: &str, partition: i32) -> Option<f64> {
    sample(
        body,
        "strom_topic_last_stable_offset_lag",
        &format!("{{topic=\"{topic}\",partition=\"{partition}\"}}"),
    )
}

/// Polls `/metrics` until `check` holds; the body it held on.
fn metrics_until(admin: &Admin, what: &str, check: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    poll_until(SHOW_DEADLINE, || {
        last = metrics(admin);
        check(&last).then_some(())
    })
    .unwrap_or_else(|| panic!("{what}: not within {SHOW_DEADLINE:?}:\n{last}"));
    last
}

/// Leaves a transaction open on every partition of [`TOPIC`] after
/// [`BEFORE`] plain records: (plain records, transaction's records).
fn leave_open(bootstrap: &str) -> (Written, Written) {
    let opened = script(
        bootstrap,
        &[
            "open",
            TOPIC,
            &PARTITIONS.to_string(),
            TXN_ID,
            &OPEN_RECORDS.to_string(),
        ],
    );
    let before = written(&opened["before"]);
    let open = written(&opened["open"]);
    for p in 0..PARTITIONS {
        assert_eq!(before[&p].len(), BEFORE);
        assert_eq!(open[&p].len(), OPEN_RECORDS);
    }
    (before, open)
}

/// The producer of the open transaction, as describe-producers shows it
/// on partition 0.
fn producer_id(broker: &Broker) -> i64 {
    let producers = strom_ok(
        broker,
        &[
            "transaction",
            "describe-producers",
            "--topic",
            TOPIC,
            "--partition",
            "0",
        ],
    );
    row(&producers, PRODUCERS_HEADER)[0].parse().unwrap()
}

#[test]
fn a_hanging_transaction_is_shown_then_aborted_by_the_tool_and_read_committed_moves_past_it() {
    let (broker, admin) = Admin::start(BROKER_ARGS);
    let bootstrap = broker.bootstrap();
    let opened_after_ms = now_ms();
    let (before, open) = leave_open(&bootstrap);
    let opened_by_ms = now_ms();
    strom_ok(&broker, &["topic", "create", "calm"]);
    let calm = script(&bootstrap, &["plain", "calm", "1", "2", "calm"]);
    assert_eq!(written(&calm)[&0].len(), 2);

    // describe-producers: the producer's open transaction starts after
    // the plain records, its last sequence is its last record's.
    let first_txn_offset = BEFORE as i64;
    let producers = strom_ok(
        &broker,
        &[
            "transaction",
            "describe-producers",
            "--topic",
            TOPIC,
            "--partition",
            "0",
        ],
    );
    let fields = row(&producers, PRODUCERS_HEADER);
    let pid: i64 = fields[0].parse().unwrap();
    assert!(pid >= 0, "{producers}");
    let last_timestamp: i64 = fields[4].parse().unwrap();
    assert_eq!(
        fields,
        [
            pid.to_string(),
            "0".into(),
            "-".into(),
            (OPEN_RECORDS - 1).to_string(),
            last_timestamp.to_string(),
            first_txn_offset.to_string(),
        ],
        "{producers}"
    );
    assert!(
        (opened_after_ms - 60_000..=opened_by_ms + 60_000).contains(&last_timestamp),
        "{producers}"
    );
    let as_json = strom_ok(
        &broker,
        &[
            "transaction",
            "describe-producers",
            "--topic",
            TOPIC,
            "--partition",
            "1",
            "--format",
            "json",
        ],
    );
    let json: serde_json::Value = serde_json::from_str(&as_json).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"producers": [{
            "producer_id": pid,
            "producer_epoch": 0,
            "coordinator_epoch": null,
            "last_sequence": OPEN_RECORDS - 1,
            "last_timestamp_ms": json["producers"][0]["last_timestamp_ms"],
            "current_transaction_start_offset": first_txn_offset,
        }]}),
        "{as_json}"
    );

    let pid_text = pid.to_string();
    let other_pid = (pid + 1).to_string();
    // list: the one transactional id, at broker 0, Ongoing; filters.
    let listed = strom_ok(&broker, &["transaction", "list"]);
    assert_eq!(
        listed,
        format!("{LIST_HEADER}\n{TXN_ID}\t0\t{pid}\tOngoing\n")
    );
    for (filter, shown) in [
        (vec!["--state", "Ongoing"], true),
        (vec!["--state", "PrepareCommit,CompleteCommit"], false),
        (vec!["--producer-id", pid_text.as_str()], true),
        (vec!["--producer-id", other_pid.as_str()], false),
        (vec!["--duration-filter", "0"], true),
        (vec!["--duration-filter", "3600000"], false),
    ] {
        let mut args = vec!["transaction", "list"];
        args.extend_from_slice(&filter);
        let listed = strom_ok(&broker, &args);
        let mut expected = format!("{LIST_HEADER}\n");
        if shown {
            expected.push_str(&format!("{TXN_ID}\t0\t{pid}\tOngoing\n"));
        }
        assert_eq!(listed, expected, "{filter:?}");
    }

    // describe: the coordinator's view, field by field.
    let described = strom_ok(&broker, &["transaction", "describe", TXN_ID]);
    let fields = row(&described, DESCRIBE_HEADER);
    let start_ms: i64 = fields[6].parse().unwrap();
    let duration_ms: i64 = fields[7].parse().unwrap();
    assert!(
        (opened_after_ms - 60_000..=opened_by_ms + 60_000).contains(&start_ms),
        "{described}"
    );
    assert!(duration_ms >= 0, "{described}");
    assert_eq!(
        fields,
        [
            "0".to_string(),
            TXN_ID.into(),
            pid.to_string(),
            "0".into(),
            "Ongoing".into(),
            "600000".into(),
            start_ms.to_string(),
            duration_ms.to_string(),
            format!("{TOPIC}-0,{TOPIC}-1"),
        ],
        "{described}"
    );

    // /metrics: one transaction open, its age, and the last stable offset
    // held back by exactly its records on both partitions.
    let body = metrics_until(&admin, "the open transaction", |body| {
        sum(body, "strom_transactions_open") == 1.0
            && samples(body, "strom_transactions_oldest_open_seconds")
                .iter()
                .any(|(_, age)| *age > 0.0)
    });
    assert_eq!(sum(&body, "strom_transactions_markers_pending"), 0.0);
    for p in 0..PARTITIONS {
        assert_eq!(
            lso_lag(&body, TOPIC, p),
            Some(OPEN_RECORDS as f64),
            "{body}"
        );
    }
    assert_eq!(lso_lag(&body, "calm", 0), Some(0.0), "{body}");
    assert_eq!(
        sample(
            &body,
            "strom_transactions_aborted_by_operator_total",
            "{shard=\"all\"}"
        ),
        Some(0.0)
    );

    // read_committed stops at the open transaction.
    let committed = read(&bootstrap, TOPIC, PARTITIONS, "read_committed");
    for p in 0..PARTITIONS {
        assert_eq!(payloads(&committed[&p]), before[&p], "partition {p}");
    }

    // Bad input: a clear error, exit 1, and nothing written.
    let ends = end_offsets(&bootstrap, TOPIC);
    let calm_ends = end_offsets(&bootstrap, "calm");
    let refused = [
        (
            vec!["transaction", "describe", "no-such-id"],
            "strom transaction: transactional id no-such-id not found".to_string(),
        ),
        (
            vec![
                "transaction",
                "describe-producers",
                "--topic",
                "no-such-topic",
                "--partition",
                "0",
            ],
            "strom transaction: topic no-such-topic does not exist".to_string(),
        ),
        (
            vec![
                "transaction",
                "abort",
                "--topic",
                TOPIC,
                "--partition",
                "0",
                "--start-offset",
                "0",
            ],
            format!(
                "strom transaction: no open transaction starts at offset 0 on {TOPIC}-0: open \
                 transactions on {TOPIC}-0 start at offset {first_txn_offset} (producer {pid} epoch 0)"
            ),
        ),
        (
            vec![
                "transaction",
                "abort",
                "--topic",
                TOPIC,
                "--partition",
                "0",
                "--producer-id",
                "987654321",
                "--producer-epoch",
                "0",
                "--coordinator-epoch",
                "0",
            ],
            format!("strom transaction: producer 987654321 is unknown on {TOPIC}-0"),
        ),
        (
            vec![
                "transaction",
                "abort",
                "--topic",
                TOPIC,
                "--partition",
                "1",
                "--producer-id",
                &pid_text,
                "--producer-epoch",
                "1",
                "--coordinator-epoch",
                "0",
            ],
            format!("strom transaction: producer {pid} is at epoch 0 on {TOPIC}-1, not 1"),
        ),
        (
            vec![
                "transaction",
                "abort",
                "--topic",
                "calm",
                "--partition",
                "0",
                "--start-offset",
                "0",
            ],
            "strom transaction: no open transaction starts at offset 0 on calm-0: no transaction \
             is open on calm-0"
                .to_string(),
        ),
    ];
    for (args, message) in &refused {
        let stderr = strom_fails(&broker, args, None);
        assert!(stderr.starts_with(message.as_str()), "{args:?}: {stderr}");
    }
    // Arguments that name no transaction are refused before any request.
    let output = strom(
        &broker,
        &["transaction", "abort", "--topic", TOPIC, "--partition", "0"],
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--start-offset"));
    assert_eq!(end_offsets(&bootstrap, TOPIC), ends);
    assert_eq!(end_offsets(&bootstrap, "calm"), calm_ends);

    // abort: partition 0 by its start offset, partition 1 by its producer.
    let first_txn_offset_text = first_txn_offset.to_string();
    let output = strom(
        &broker,
        &[
            "transaction",
            "abort",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--start-offset",
            &first_txn_offset_text,
        ],
        None,
    );
    assert!(output.status.success(), "{output:?}\n{}", broker.log());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!(
            "Aborted the transaction of producer {pid} (epoch 0) open on {TOPIC}-0 from offset \
             {first_txn_offset}.\n"
        )
    );
    // The coordinator still counts it open: the tool says so.
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "transactional id {TXN_ID} (coordinator 0) still has producer {pid}'s transaction Ongoing"
        )),
        "{stderr}"
    );
    let aborted = strom_ok(
        &broker,
        &[
            "transaction",
            "abort",
            "--topic",
            TOPIC,
            "--partition",
            "1",
            "--producer-id",
            &pid_text,
            "--producer-epoch",
            "0",
            "--coordinator-epoch",
            "0",
        ],
    );
    assert_eq!(
        aborted,
        format!(
            "Aborted the transaction of producer {pid} (epoch 0) open on {TOPIC}-1 from offset \
             {first_txn_offset}.\n"
        )
    );
    // One marker more on each partition, nothing else.
    let after_abort: BTreeMap<i32, i64> = ends.iter().map(|(&p, &end)| (p, end + 1)).collect();
    assert_eq!(end_offsets(&bootstrap, TOPIC), after_abort);
    let fields = row(
        &strom_ok(
            &broker,
            &[
                "transaction",
                "describe-producers",
                "--topic",
                TOPIC,
                "--partition",
                "0",
            ],
        ),
        PRODUCERS_HEADER,
    );
    assert_eq!(fields[0], pid.to_string());
    assert_eq!(fields[5], "-", "no transaction open any more");
    // A second abort finds nothing open.
    for args in [
        vec![
            "transaction",
            "abort",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--start-offset",
            "3",
        ],
        vec![
            "transaction",
            "abort",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--producer-id",
            &pid_text,
            "--producer-epoch",
            "0",
            "--coordinator-epoch",
            "0",
        ],
    ] {
        let stderr = strom_fails(&broker, &args, None);
        assert!(
            stderr.contains("no transaction is open on held-0")
                && (stderr.contains("no open transaction starts at offset 3")
                    || stderr
                        .contains(&format!("producer {pid} has no transaction open on held-0"))),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(end_offsets(&bootstrap, TOPIC), after_abort);

    // /metrics: the partitions' last stable offsets moved on, the aborts
    // counted; the coordinator, which the tool does not touch, still
    // counts the transaction open (until its timeout).
    let body = metrics_until(&admin, "the aborts", |body| {
        (0..PARTITIONS).all(|p| lso_lag(body, TOPIC, p) == Some(0.0))
    });
    assert_eq!(
        sample(
            &body,
            "strom_transactions_aborted_by_operator_total",
            "{shard=\"all\"}"
        ),
        Some(PARTITIONS as f64),
        "{body}"
    );
    assert_eq!(sum(&body, "strom_transactions_open"), 1.0, "{body}");
    assert_eq!(
        strom_ok(&broker, &["transaction", "list"]),
        format!("{LIST_HEADER}\n{TXN_ID}\t0\t{pid}\tOngoing\n")
    );

    // Records after the aborted transaction are read_committed, byte for
    // byte; the aborted ones never; all are still stored.
    let after = written(&script(
        &bootstrap,
        &[
            "plain",
            TOPIC,
            &PARTITIONS.to_string(),
            &AFTER.to_string(),
            "after",
        ],
    ));
    let committed = read(&bootstrap, TOPIC, PARTITIONS, "read_committed");
    let everything = read(&bootstrap, TOPIC, PARTITIONS, "read_uncommitted");
    for p in 0..PARTITIONS {
        let mut want = before[&p].clone();
        want.extend(after[&p].iter().cloned());
        assert_eq!(payloads(&committed[&p]), want, "partition {p}");
        // Past the transaction's records and its marker.
        let first_after = committed[&p][BEFORE].0;
        assert_eq!(first_after, (BEFORE + OPEN_RECORDS + 1) as i64);
        let mut all = before[&p].clone();
        all.extend(open[&p].iter().cloned());
        all.extend(after[&p].iter().cloned());
        assert_eq!(payloads(&everything[&p]), all, "partition {p}");
    }
    assert!(
        broker
            .log()
            .contains("an operator aborted a transaction open on this partition"),
        "{}",
        broker.log()
    );
}

fn marker(
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    partition: i32,
) -> WritableTxnMarker {
    WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_coordinator_epoch(coordinator_epoch)
        .with_transaction_result(commit)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_indexes(vec![partition])])
}

/// One WriteTxnMarkers as an operator's tool sends it; the partition's
/// error code.
fn write_marker(broker: &Broker, marker: WritableTxnMarker, correlation_id: i32) -> i16 {
    send_marker(
        broker,
        WriteTxnMarkersRequest::default().with_markers(vec![marker]),
        correlation_id,
    )
}

/// One WriteTxnMarkers as a transaction coordinator on broker 0 sends it
/// (the broker's own tagged field naming the sender); the partition's
/// error code.
fn write_coordinators_marker(
    broker: &Broker,
    marker: WritableTxnMarker,
    correlation_id: i32,
) -> i16 {
    let from_coordinator = std::collections::BTreeMap::from([(
        broker::txn::markers::FROM_COORDINATOR_TAG,
        bytes::Bytes::copy_from_slice(&0i32.to_be_bytes()),
    )]);
    send_marker(
        broker,
        WriteTxnMarkersRequest::default()
            .with_markers(vec![marker])
            .with_unknown_tagged_fields(from_coordinator),
        correlation_id,
    )
}

fn send_marker(broker: &Broker, request: WriteTxnMarkersRequest, correlation_id: i32) -> i16 {
    let mut stream = raw::connect(broker);
    let response: WriteTxnMarkersResponse = raw::call(
        &mut stream,
        ApiKey::WriteTxnMarkers,
        1,
        correlation_id,
        "operator",
        &request,
    );
    let codes: Vec<i16> = response
        .markers
        .iter()
        .flat_map(|m| m.topics.iter())
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes.len(), 1, "{response:?}");
    codes[0]
}

/// The broker's own check of an operator's marker, whatever the tool
/// checked before: each refusal writes nothing.
#[test]
fn an_operators_marker_is_written_only_to_abort_an_open_transaction_at_its_producers_epoch() {
    use protocol::kafka_protocol::error::ResponseError;
    let broker = Broker::start(BROKER_ARGS);
    let bootstrap = broker.bootstrap();
    let (before, _) = leave_open(&bootstrap);
    let pid = producer_id(&broker);
    let ends = end_offsets(&bootstrap, TOPIC);
    let refusals = [
        (
            marker(pid + 1_000, 0, 0, false, 0),
            ResponseError::UnknownProducerId,
        ),
        (
            marker(pid, 1, 0, false, 0),
            ResponseError::InvalidProducerEpoch,
        ),
        (marker(pid, 0, 0, true, 0), ResponseError::InvalidRequest),
        (marker(pid, 0, -1, false, 0), ResponseError::InvalidRequest),
    ];
    for (i, (marker, error)) in refusals.into_iter().enumerate() {
        assert_eq!(
            write_marker(&broker, marker, i as i32),
            error.code(),
            "{error:?}"
        );
        assert_eq!(end_offsets(&bootstrap, TOPIC), ends, "{error:?}");
    }
    // The abort passes once; the same again finds nothing open.
    assert_eq!(write_marker(&broker, marker(pid, 0, 3, false, 0), 10), 0);
    let after_abort = end_offsets(&bootstrap, TOPIC);
    assert_eq!(after_abort[&0], ends[&0] + 1);
    assert_eq!(after_abort[&1], ends[&1]);
    assert_eq!(
        write_marker(&broker, marker(pid, 0, 3, false, 0), 11),
        ResponseError::InvalidTxnState.code()
    );
    assert_eq!(end_offsets(&bootstrap, TOPIC), after_abort);
    // The partition remembers the coordinator epoch of that marker: a
    // coordinator older than it is deposed, and its marker is refused.
    assert_eq!(
        write_coordinators_marker(&broker, marker(pid, 0, 2, true, 0), 12),
        ResponseError::TransactionCoordinatorFenced.code()
    );
    assert_eq!(end_offsets(&bootstrap, TOPIC), after_abort);
    let described = strom_ok(
        &broker,
        &[
            "transaction",
            "describe-producers",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--format",
            "json",
        ],
    );
    let described: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(
        described["producers"][0]["coordinator_epoch"],
        serde_json::json!(3),
        "{described}"
    );
    // Partition 0 is read past the transaction; partition 1 still waits.
    let committed = read(&bootstrap, TOPIC, PARTITIONS, "read_committed");
    assert_eq!(payloads(&committed[&0]), before[&0]);
    assert_eq!(payloads(&committed[&1]), before[&1]);
    let plain = written(&script(&bootstrap, &["plain", TOPIC, "2", "1", "late"]));
    let committed = read(&bootstrap, TOPIC, PARTITIONS, "read_committed");
    let mut want = before[&0].clone();
    want.extend(plain[&0].iter().cloned());
    assert_eq!(payloads(&committed[&0]), want);
    assert_eq!(payloads(&committed[&1]), before[&1]);
}

#[test]
fn the_coordinators_count_commits_aborts_and_timed_out_aborts() {
    let (broker, admin) = Admin::start(&[
        "--set",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    ]);
    let bootstrap = broker.bootstrap();
    script(&bootstrap, &["end", "txn-cli-ends", "ends"]);
    script(&bootstrap, &["time-out", "txn-cli-late", "late", "1"]);
    let body = metrics_until(&admin, "one commit, two aborts, one timed out", |body| {
        let all = |name| sample(body, name, "{shard=\"all\"}");
        all("strom_transactions_committed_total") == Some(1.0)
            && all("strom_transactions_aborted_total") == Some(2.0)
            && all("strom_transactions_timed_out_total") == Some(1.0)
            && sum(body, "strom_transactions_open") == 0.0
    });
    assert_eq!(sum(&body, "strom_transactions_markers_pending"), 0.0);
    assert_eq!(
        sample(
            &body,
            "strom_transactions_aborted_by_operator_total",
            "{shard=\"all\"}"
        ),
        Some(0.0)
    );
    for (_, age) in samples(&body, "strom_transactions_oldest_open_seconds") {
        assert_eq!(age, 0.0, "{body}");
    }
    // The per-shard counts add up to the total.
    let shards: f64 = samples(&body, "strom_transactions_aborted_total")
        .iter()
        .filter(|(labels, _)| labels != "{shard=\"all\"}")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(shards, 2.0, "{body}");
    let listed = strom_ok(
        &broker,
        &["transaction", "list", "--state", "CompleteAbort"],
    );
    assert!(
        listed.contains("txn-cli-ends\t0\t") && listed.contains("txn-cli-late\t0\t"),
        "{listed}"
    );
    assert_eq!(
        strom_ok(&broker, &["transaction", "list", "--state", "Ongoing"]),
        format!("{LIST_HEADER}\n")
    );
}

/// Three brokers: partitions led by all of them, coordinators on some.
/// A transaction timing out is aborted by its coordinator with a newer
/// epoch on the partitions other brokers lead (its markers go there as
/// WriteTxnMarkers, marked as a coordinator's, and must be written
/// although they fence the producer); `list` asks every broker, and
/// `describe-producers` and `abort` find each partition's leader.
#[test]
fn in_a_cluster_the_tools_find_coordinators_and_leaders_and_coordinators_markers_still_pass() {
    let cluster = Cluster::start(
        3,
        &[
            "--set",
            "transaction.max.timeout.ms=1200000",
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        ],
    );
    let bootstrap = cluster.bootstrap();
    let partitions = 3;
    let opened = script(
        &bootstrap,
        &[
            "open",
            TOPIC,
            &partitions.to_string(),
            TXN_ID,
            &OPEN_RECORDS.to_string(),
        ],
    );
    let before = written(&opened["before"]);
    script(
        &bootstrap,
        &["time-out", "txn-cli-late", "late", &partitions.to_string()],
    );
    let leaders = |topic: &str| -> Vec<String> {
        let output = strom_at(Some(&bootstrap), &["topic", "describe", topic], None);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| {
                l.split('\t')
                    .find_map(|f| f.strip_prefix("Leader: "))
                    .map(str::to_string)
            })
            .collect()
    };
    for topic in [TOPIC, "late"] {
        let mut led_by = leaders(topic);
        led_by.sort();
        led_by.dedup();
        assert_eq!(led_by.len(), 3, "{topic}: every broker leads a partition");
    }
    // The timed-out transaction is aborted everywhere, so read_committed
    // consumers of `late` reach its end, with nothing of it visible.
    cluster.wait_for("the timed-out transaction aborted", || {
        let output = strom_at(
            Some(&bootstrap),
            &["transaction", "list", "--state", "CompleteAbort"],
            None,
        );
        (output.status.success()
            && String::from_utf8_lossy(&output.stdout).contains("txn-cli-late\t"))
        .then_some(())
    });
    let late = read(&bootstrap, "late", partitions, "read_committed");
    assert!(late.values().all(Vec::is_empty), "{late:?}");

    let listed = strom_at(
        Some(&bootstrap),
        &["transaction", "list", "--state", "Ongoing"],
        None,
    );
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    let fields = row(&listed, LIST_HEADER);
    assert_eq!(fields[0], TXN_ID);
    let coordinator = fields[1].clone();
    let described = strom_at(Some(&bootstrap), &["transaction", "describe", TXN_ID], None);
    assert!(described.status.success(), "{described:?}");
    let described = row(
        &String::from_utf8(described.stdout).unwrap(),
        DESCRIBE_HEADER,
    );
    assert_eq!(described[0], coordinator);
    assert_eq!(described[4], "Ongoing");
    assert_eq!(described[8], format!("{TOPIC}-0,{TOPIC}-1,{TOPIC}-2"));
    for p in 0..partitions {
        let output = strom_at(
            Some(&bootstrap),
            &[
                "transaction",
                "abort",
                "--topic",
                TOPIC,
                "--partition",
                &p.to_string(),
                "--start-offset",
                &BEFORE.to_string(),
            ],
            None,
        );
        assert!(output.status.success(), "{output:?}\n{}", cluster.logs());
    }
    let committed = read(&bootstrap, TOPIC, partitions, "read_committed");
    for p in 0..partitions {
        assert_eq!(payloads(&committed[&p]), before[&p], "partition {p}");
    }
}

#[test]
fn each_transaction_tool_explains_itself_in_its_help() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["transaction", "--help"],
            &["list", "describe", "describe-producers", "abort"],
        ),
        (
            &["transaction", "list", "--help"],
            &[
                "--state",
                "--producer-id",
                "--duration-filter",
                "--format",
                "--bootstrap",
            ],
        ),
        (
            &["transaction", "describe", "--help"],
            &["<TRANSACTIONAL_ID>", "--format"],
        ),
        (
            &["transaction", "describe-producers", "--help"],
            &["--topic", "--partition", "CurrentTransactionStartOffset"],
        ),
        (
            &["transaction", "abort", "--help"],
            &[
                "KIP-664",
                "--start-offset",
                "--producer-id",
                "--producer-epoch",
                "--coordinator-epoch",
                "strom transaction abort --topic orders --partition 0 --start-offset 1200",
            ],
        ),
    ];
    for (args, mentions) in cases {
        let output = strom_at(None, args, None);
        assert!(output.status.success(), "{args:?}: {output:?}");
        let help = String::from_utf8(output.stdout).unwrap();
        for mention in mentions {
            assert!(help.contains(mention), "{args:?} lacks {mention}:\n{help}");
        }
    }
}

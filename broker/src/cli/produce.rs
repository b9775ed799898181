//! `strom produce TOPIC`: one record per stdin line, sent in v2 batches.
//!
//! Lines are read as bytes (any encoding; only `\n` ends a line), each
//! `[HEADERS HSEP][KEY KSEP]VALUE` with `--header-separator HSEP` and
//! `--key-separator KSEP` (see [`split_line`] and [`parse_headers`]). Records
//! are batched while more input is already buffered, so piped input goes in
//! large batches and typed input goes out line by line. A record's
//! partition is `--partition`, else the Java client's murmur2 hash of its
//! key, else round-robin per batch. Each partition's records go to its
//! leader (one connection per leader, the bootstrap one for the broker it
//! reached). Up to [`PRODUCE_IN_FLIGHT_MAX`] requests are pipelined in
//! all; a partition's requests all go on its leader's connection, which
//! keeps per-partition order.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use protocol::batch::build::{self, NewRecord};
use protocol::client::{check_error, Connection, Pending};

use protocol::admin::{partitions, topic_name, Router};

use super::{key_value, ConnectArgs};

const PRODUCE_VERSIONS: std::ops::RangeInclusive<i16> = 3..=9;
/// Requests awaiting their response before the next is sent.
pub const PRODUCE_IN_FLIGHT_MAX: usize = 5;
/// A request is sent when it holds this many records or bytes.
const REQUEST_RECORDS_MAX: usize = 10_000;
const REQUEST_BYTES_MAX: usize = 1 << 20;
const STDIN_BUFFER_BYTES: usize = 1 << 16;
/// How long the broker may take to acknowledge.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Acks {
    /// No acknowledgement: nothing is known about delivery.
    #[value(name = "0")]
    None,
    /// The leader has appended the records.
    #[value(name = "1")]
    Leader,
    /// Every in-sync replica has the records (durable per the flush policy).
    #[value(name = "all", alias = "-1")]
    All,
}

impl Acks {
    fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Topic to write to (created if the broker auto-creates topics).
    topic: String,
    /// Split each line at the first SEP into key and value; a line without
    /// SEP is sent with a null key and the whole line as value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Acknowledgement to wait for: 0 (none), 1 (leader), all (in-sync replicas).
    #[arg(long, value_enum, default_value = "all")]
    acks: Acks,
    /// Write every record to this partition instead of choosing by key hash.
    #[arg(long, value_name = "N")]
    partition: Option<i32>,
    /// Header added to every record, e.g. --header source=cli (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = key_value)]
    headers: Vec<(String, String)>,
    /// Read each record's own headers from the start of its line, up to
    /// the first SEP: KEY:VALUE pairs separated by commas, as `strom
    /// consume --print-headers` prints them (a KEY without `:` has a null
    /// value; `NO_HEADERS` or nothing: none). The rest of the line is the
    /// key and value as usual, so a line reads HEADERS SEP [KEY KSEP] VALUE,
    /// e.g. with --header-separator '|' --key-separator ':' the line
    /// `trace:42,source:web|user-1:hello`. A line without SEP has no headers
    /// of its own. A line's headers come after the --header ones.
    #[arg(long, value_name = "SEP")]
    header_separator: Option<String>,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// A record header: key and value (`None`: null).
type Header = (Vec<u8>, Option<Vec<u8>>);

/// The text that stands for "no headers", as `strom consume
/// --print-headers` and Kafka's console consumer print it.
const NO_HEADERS: &[u8] = b"NO_HEADERS";

/// One line turned into a record, waiting for its batch.
struct Line {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// The line's own headers (after the `--header` ones).
    headers: Vec<Header>,
    timestamp_ms: i64,
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut connection = args.connect.connect().await?;
    let version = connection.version::<ProduceRequest>(PRODUCE_VERSIONS)?;
    let partition_ids = partitions(&mut connection, &args.topic, true).await?;
    if let Some(partition) = args.partition {
        if !partition_ids.contains(&partition) {
            bail!(
                "topic {} has no partition {partition} (it has {})",
                args.topic,
                partition_ids.len()
            );
        }
    }
    let router = Router::discover(&mut connection, std::slice::from_ref(&args.topic)).await?;
    let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = args
        .headers
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
        .collect();
    let separator = args.key_separator.as_deref().map(str::as_bytes);
    if separator == Some(b"") {
        bail!("--key-separator must not be empty");
    }
    let header_separator = args.header_separator.as_deref().map(str::as_bytes);
    if header_separator == Some(b"") {
        bail!("--header-separator must not be empty");
    }

    let mut producer = Producer {
        bootstrap: &mut connection,
        router,
        topic: args.topic.clone(),
        version,
        acks: args.acks,
        in_flight: VecDeque::new(),
    };
    let mut stdin = BufReader::with_capacity(STDIN_BUFFER_BYTES, std::io::stdin());
    let mut lines: Vec<Line> = Vec::new();
    let mut buffered_bytes = 0usize;
    let mut round_robin = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = stdin
            .read_until(b'\n', &mut line)
            .context("cannot read stdin")?;
        let at_end = read == 0;
        if !at_end {
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let (headers, rest) = match header_separator {
                None => (Vec::new(), &line[..]),
                Some(header_separator) => match split_line(&line, Some(header_separator)) {
                    (Some(headers), _) => {
                        let at = headers.len() + header_separator.len();
                        (parse_headers(&headers), &line[at..])
                    }
                    (None, _) => (Vec::new(), &line[..]),
                },
            };
            let (key, value) = split_line(rest, separator);
            buffered_bytes += value.len()
                + key.as_ref().map_or(0, Vec::len)
                + headers
                    .iter()
                    .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                    .sum::<usize>();
            lines.push(Line {
                key,
                value,
                headers,
                timestamp_ms: storage::clock::system_wall_ms(),
            });
        }
        let input_waits = stdin.buffer().is_empty();
        let full = lines.len() >= REQUEST_RECORDS_MAX || buffered_bytes >= REQUEST_BYTES_MAX;
        if !lines.is_empty() && (at_end || input_waits || full) {
            let by_partition = assign(
                std::mem::take(&mut lines),
                args.partition,
                &partition_ids,
                &mut round_robin,
            );
            producer.send(by_partition, &headers).await?;
            buffered_bytes = 0;
        }
        if at_end {
            break;
        }
    }
    producer.finish().await
}

fn split_line(line: &[u8], separator: Option<&[u8]>) -> (Option<Vec<u8>>, Vec<u8>) {
    if let Some(separator) = separator {
        if let Some(at) = line
            .windows(separator.len())
            .position(|window| window == separator)
        {
            return (
                Some(line[..at].to_vec()),
                line[at + separator.len()..].to_vec(),
            );
        }
    }
    (None, line.to_vec())
}

/// A line's headers: `KEY:VALUE` pairs separated by `,` (the value after
/// the first `:`; a key without `:` has a null value; empty pairs are
/// skipped); `NO_HEADERS` means none.
fn parse_headers(text: &[u8]) -> Vec<Header> {
    if text == NO_HEADERS {
        return Vec::new();
    }
    text.split(|b| *b == b',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|b| *b == b':') {
            Some(at) => (pair[..at].to_vec(), Some(pair[at + 1..].to_vec())),
            None => (pair.to_vec(), None),
        })
        .collect()
}

/// Groups lines by partition: the fixed one, else murmur2 of the key, else
/// one partition per batch in turn (sticky, like the Java client).
fn assign(
    lines: Vec<Line>,
    fixed: Option<i32>,
    partition_ids: &[i32],
    round_robin: &mut usize,
) -> BTreeMap<i32, Vec<Line>> {
    let sticky = partition_ids[*round_robin % partition_ids.len()];
    *round_robin = round_robin.wrapping_add(1);
    let mut by_partition: BTreeMap<i32, Vec<Line>> = BTreeMap::new();
    for line in lines {
        let partition = match (fixed, &line.key) {
            (Some(partition), _) => partition,
            (None, Some(key)) => {
                partition_ids
                    [protocol::partitioner::partition_index_for_key(key, partition_ids.len())]
            }
            (None, None) => sticky,
        };
        by_partition.entry(partition).or_default().push(line);
    }
    by_partition
}

struct Producer<'a> {
    bootstrap: &'a mut Connection,
    router: Router,
    topic: String,
    /// The Produce version the bootstrap broker and this tool share.
    version: i16,
    acks: Acks,
    /// Requests awaiting their response, oldest first, with their leader.
    in_flight: VecDeque<(i32, Pending<ProduceResponse>)>,
}

impl Producer<'_> {
    async fn send(
        &mut self,
        by_partition: BTreeMap<i32, Vec<Line>>,
        headers: &[(Vec<u8>, Option<Vec<u8>>)],
    ) -> anyhow::Result<()> {
        let topic = self.topic.clone();
        let by_leader = self
            .router
            .by_leader(
                by_partition
                    .into_iter()
                    .map(|(p, lines)| (topic.as_str(), p, lines)),
            )?
            .into_iter()
            .map(|(leader, parts)| {
                let parts: Vec<(i32, Vec<Line>)> =
                    parts.into_iter().map(|(_, p, lines)| (p, lines)).collect();
                (leader, parts)
            })
            .collect::<BTreeMap<i32, Vec<(i32, Vec<Line>)>>>();
        for (leader, parts) in by_leader {
            let request = self.request(parts, headers);
            if let Acks::None = self.acks {
                let connection = self.router.connection(self.bootstrap, leader).await?;
                let version = self
                    .version
                    .min(connection.version::<ProduceRequest>(PRODUCE_VERSIONS)?);
                connection.send_without_response(&request, version).await?;
                continue;
            }
            while self.in_flight.len() >= PRODUCE_IN_FLIGHT_MAX {
                self.receive_oldest().await?;
            }
            let connection = self.router.connection(self.bootstrap, leader).await?;
            let version = self
                .version
                .min(connection.version::<ProduceRequest>(PRODUCE_VERSIONS)?);
            let pending = connection.send(&request, version).await?;
            self.in_flight.push_back((leader, pending));
        }
        Ok(())
    }

    /// One Produce request holding a batch per partition.
    fn request(
        &self,
        parts: Vec<(i32, Vec<Line>)>,
        headers: &[(Vec<u8>, Option<Vec<u8>>)],
    ) -> ProduceRequest {
        let partition_data = parts
            .into_iter()
            .map(|(partition, lines)| {
                let base_timestamp = lines.first().map_or(0, |l| l.timestamp_ms);
                let records: Vec<NewRecord> = lines
                    .into_iter()
                    .map(|line| NewRecord {
                        key: line.key,
                        value: Some(line.value),
                        headers: headers.iter().cloned().chain(line.headers).collect(),
                        timestamp_delta: line.timestamp_ms - base_timestamp,
                    })
                    .collect();
                PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(Bytes::from(build::batch(base_timestamp, &records))))
            })
            .collect();
        ProduceRequest::default()
            .with_acks(self.acks.wire())
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(&self.topic))
                .with_partition_data(partition_data)])
    }

    async fn receive_oldest(&mut self) -> anyhow::Result<()> {
        let Some((leader, pending)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let connection = self.router.connection(self.bootstrap, leader).await?;
        let response = connection.receive(pending).await?;
        for topic in &response.responses {
            for partition in &topic.partition_responses {
                check_error(
                    ApiKey::Produce,
                    partition.error_code,
                    partition.error_message.as_ref().map(|m| m.as_str()),
                )
                .with_context(|| {
                    format!(
                        "cannot produce to {}-{}",
                        topic.name.0.as_str(),
                        partition.index
                    )
                })?;
            }
        }
        Ok(())
    }

    async fn finish(mut self) -> anyhow::Result<()> {
        while !self.in_flight.is_empty() {
            self.receive_oldest().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(
            split_line(b"k::v::w", Some(b"::")),
            (Some(b"k".to_vec()), b"v::w".to_vec())
        );
        assert_eq!(
            split_line(b"no-sep", Some(b"::")),
            (None, b"no-sep".to_vec())
        );
        assert_eq!(split_line(b"k:v", None), (None, b"k:v".to_vec()));
        assert_eq!(split_line(b":v", Some(b":")), (Some(vec![]), b"v".to_vec()));
    }

    #[test]
    fn header_text_reads_as_consume_prints_it() {
        let header =
            |k: &str, v: Option<&str>| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()));
        let check = |text: &str, expected: Vec<Header>| {
            assert_eq!(parse_headers(text.as_bytes()), expected, "{text:?}");
        };
        check("", vec![]);
        check("NO_HEADERS", vec![]);
        check("a:1", vec![header("a", Some("1"))]);
        check(
            "a:1,b:x:y,,c:,d",
            vec![
                header("a", Some("1")),
                header("b", Some("x:y")),
                header("c", Some("")),
                header("d", None),
            ],
        );
    }
}

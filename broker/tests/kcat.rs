//! kcat (Debian's, librdkafka 2.0) against a real strom process:
//! metadata listing and 10,000 keyed messages with headers, produced and
//! consumed back exactly. Needs `apt-get install -y kcat`.

mod common;

use std::collections::HashMap;

use common::Broker;

fn kcat(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> String {
    String::from_utf8(common::kcat(broker, args, stdin)).unwrap()
}

fn value_for(i: usize) -> String {
    // Varying length and content, none of kcat's delimiters.
    let pattern = protocol::batch::build::pattern(i as u64, 1 + i % 200);
    let hex: String = pattern.iter().map(|b| format!("{b:02x}")).collect();
    format!("value-{i}-{hex}")
}

#[test]
fn metadata_lists_broker_and_topics() {
    let broker = Broker::start(&["--set", "num.partitions=3"]);
    let empty = kcat(&broker, &["-L"], None);
    assert!(empty.contains("1 brokers:"), "{empty}");
    assert!(
        empty.contains(&format!("broker 0 at {} (controller)", broker.bootstrap())),
        "{empty}"
    );
    kcat(&broker, &["-P", "-t", "listed"], Some(b"one\n"));
    let listed = kcat(&broker, &["-L", "-t", "listed"], None);
    assert!(
        listed.contains("topic \"listed\" with 3 partitions:"),
        "{listed}"
    );
    for partition in 0..3 {
        assert!(
            listed.contains(&format!(
                "partition {partition}, leader 0, replicas: 0, isrs: 0"
            )),
            "{listed}"
        );
    }
}

#[test]
fn ten_thousand_keyed_messages_with_headers_round_trip() {
    const COUNT: usize = 10_000;
    let broker = Broker::start(&["--set", "num.partitions=4"]);
    let mut input = String::new();
    for i in 0..COUNT {
        input.push_str(&format!("key-{i}:{}\n", value_for(i)));
    }
    kcat(
        &broker,
        &[
            "-P",
            "-t",
            "keyed",
            "-K",
            ":",
            "-H",
            "source=kcat",
            "-H",
            "trace=abc-123",
            "-X",
            "linger.ms=5",
        ],
        Some(input.as_bytes()),
    );
    let output = kcat(
        &broker,
        &["-C", "-t", "keyed", "-e", "-q", "-f", "%p|%o|%k|%s|%h\n"],
        None,
    );
    let mut seen: HashMap<usize, (i32, i64)> = HashMap::new();
    let mut last_offset: HashMap<i32, i64> = HashMap::new();
    for line in output.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        assert_eq!(fields.len(), 5, "{line}");
        let partition: i32 = fields[0].parse().unwrap();
        let offset: i64 = fields[1].parse().unwrap();
        let i: usize = fields[2]
            .strip_prefix("key-")
            .expect("key shape")
            .parse()
            .unwrap();
        assert_eq!(fields[3], value_for(i), "value of key-{i}");
        assert_eq!(fields[4], "source=kcat,trace=abc-123", "headers of key-{i}");
        let previous = last_offset.insert(partition, offset);
        assert!(
            previous.is_none_or(|p| offset == p + 1),
            "partition {partition}: offset {offset} after {previous:?}"
        );
        assert!(
            seen.insert(i, (partition, offset)).is_none(),
            "key-{i} seen twice"
        );
    }
    assert_eq!(seen.len(), COUNT, "every message consumed once");
    // The same key always lands in the same partition, in produce order.
    for p in 0..4 {
        let mut keys: Vec<(i64, usize)> = seen
            .iter()
            .filter(|(_, (pp, _))| *pp == p)
            .map(|(i, (_, o))| (*o, *i))
            .collect();
        keys.sort();
        assert!(
            keys.windows(2).all(|w| w[0].1 < w[1].1),
            "partition {p} keeps produce order"
        );
    }
}

//! Hostile clients against a broker with known memory budgets: fetchers
//! that never read their answers, frames announced and never sent, large
//! produce frames sent half-way, idle connections. The broker's resident
//! memory must stay within a stated multiple of its budgets while a
//! well-behaved client on its own connection keeps getting answers within
//! a bound, every byte of its records read back.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::hostile::*;
use common::{poll_until, raw};
use protocol::kafka_protocol::messages::{ApiKey, FetchResponse};

#[test]
fn fetchers_that_never_read_are_held_to_the_response_budgets() {
    let broker = start_budgeted(&[]);
    // 24 MiB in one partition, so every fetch could answer 24 MiB.
    let mut setup = raw::connect(&broker);
    for i in 0..24 {
        let batch = protocol::batch::build::patterned(1_700_000_000_000, 1_000, 1_000, i);
        produce(&mut setup, "data", &batch, i as i32);
    }
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        99,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    let watch = RssWatch::start(broker.pid(), baseline + 2 * BUDGET_BOUND);

    // Ten connections, each pipelining 300 fetches of up to 50 MB of the
    // whole partition, never reading an answer.
    let mut fetches = Vec::new();
    for i in 0..300 {
        fetches.extend(raw::frame(
            ApiKey::Fetch,
            12,
            i,
            "never-reads",
            &fetch_request("data", 0, 50_000_000),
        ));
    }
    let release = Release::new();
    let threads = hostile(&broker, 10, fetches, release.clone());
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    let response_peak = metric(&broker, "strom_queued_response_bytes_peak");
    assert_within(
        &broker,
        watch,
        baseline,
        BUDGET_BOUND,
        "never-reading fetchers",
    );
    eprintln!(
        "well-behaved: {rounds} rounds, slowest answer {slowest:?}; response budget peak {} MiB",
        response_peak / MIB
    );
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Beyond the cores' shares, a connection holds at most its own budget
    // and one batch (a fetch always answers its first batch).
    assert!(
        response_peak <= RESPONSE_BUDGET + 10 * (CONNECTION_RESPONSE_BUDGET + MIB),
        "responses waiting peaked at {} MiB",
        response_peak / MIB
    );
    end(release, threads);
}

#[test]
fn frames_announced_and_never_sent_hold_neither_memory_nor_budget() {
    let broker = start_budgeted(&[]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    let address_space = vm_size_bytes(broker.pid()).unwrap();
    let watch = RssWatch::start(broker.pid(), baseline + 2 * BUDGET_BOUND);

    // 300 connections announce an 8 MiB Metadata frame (the largest allowed
    // for it) and send its api key and a few bytes more, then stall.
    let release = Release::new();
    let threads = hostile(
        &broker,
        300,
        {
            let mut head = ((8u32 << 20) as i32).to_be_bytes().to_vec();
            head.extend_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
            head.extend_from_slice(&[0, 12, 0, 0, 0, 1]);
            head
        },
        release.clone(),
    );
    // No buffer of a whole frame before it is admitted: untouched, it is
    // not resident yet, but the allocator hands it out again touched, and
    // round after round such attacks grew the broker without end.
    let all_stalled = poll_until(Duration::from_secs(10), || {
        (metric(&broker, "strom_connections") >= 300).then_some(())
    });
    assert!(all_stalled.is_some(), "300 connections not accepted");
    let grown = vm_size_bytes(broker.pid())
        .unwrap()
        .saturating_sub(address_space);
    assert!(
        grown <= BUDGET_BOUND,
        "300 stalled 8 MiB frames took {} MiB of address space (bound {} MiB)",
        grown / MIB,
        BUDGET_BOUND / MIB
    );
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    assert_within(
        &broker,
        watch,
        baseline,
        BUDGET_BOUND,
        "stalled 8 MiB headers",
    );
    eprintln!("well-behaved: {rounds} rounds, slowest answer {slowest:?}");
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Past the receive timeout every stalled connection was closed.
    let closed = poll_until(Duration::from_secs(10), || {
        let closed = metric(&broker, "strom_connections_closed_receive_timeout_total");
        (closed >= 300).then_some(closed)
    });
    assert!(
        closed.is_some(),
        "stalled connections closed: {} of 300",
        metric(&broker, "strom_connections_closed_receive_timeout_total")
    );
    end(release, threads);
}

#[test]
fn half_sent_large_produce_frames_wait_for_budget_and_time_out() {
    let broker = start_budgeted(&[]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    // A frame larger than a core's whole share is admitted alone, so each
    // core may hold one such frame beyond its budget: here half of 100 MiB.
    let frame_bytes: u64 = 100 * MIB;
    let bound = BUDGET_BOUND + 2 * frame_bytes;
    let watch = RssWatch::start(broker.pid(), baseline + 2 * bound);

    // 40 connections each send half of a 100 MiB Produce frame, then stall.
    let release = Release::new();
    let threads = hostile(
        &broker,
        40,
        {
            let mut half = vec![0x5a; (frame_bytes / 2) as usize];
            half[..4].copy_from_slice(&(frame_bytes as i32).to_be_bytes());
            half[4..6].copy_from_slice(&(ApiKey::Produce as i16).to_be_bytes());
            half
        },
        release.clone(),
    );
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    let request_peak = metric(&broker, "strom_queued_request_bytes_peak");
    assert_within(
        &broker,
        watch,
        baseline,
        bound,
        "half-sent 100 MiB produce frames",
    );
    eprintln!(
        "well-behaved: {rounds} rounds, slowest answer {slowest:?}; request budget peak {} MiB",
        request_peak / MIB
    );
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Per core: one large frame alone, or its share, plus small frames.
    assert!(
        request_peak <= 2 * frame_bytes + 4 * MIB,
        "request budget peaked at {} MiB",
        request_peak / MIB
    );
    assert!(
        metric(&broker, "strom_connections_closed_receive_timeout_total") >= 2,
        "admitted frames that stalled were closed at the receive timeout\n{}",
        broker.log()
    );
    end(release, threads);
}

#[test]
fn idle_connections_are_closed_and_a_long_poll_is_not_idle() {
    let broker = start_budgeted(&["--set", "connections.max.idle.ms=1000"]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );

    // A connection that says nothing is closed after about a second.
    let mut idle = TcpStream::connect(broker.address()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let read = idle.read(&mut byte);
    assert!(
        matches!(read, Ok(0)),
        "an idle connection is closed by the broker, got {read:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "closed after {took:?}, connections.max.idle.ms=1000"
    );
    assert!(metric(&broker, "strom_connections_closed_idle_total") >= 1);

    // A fetch long-polling for 2.5 s keeps its connection: a request in
    // flight is not idleness.
    let mut polling = raw::connect(&broker);
    let started = Instant::now();
    let fetched: FetchResponse = raw::call(
        &mut polling,
        ApiKey::Fetch,
        12,
        7,
        "long-poll",
        &fetch_request("good", 1, 1 << 20)
            .with_max_wait_ms(2_500)
            .with_min_bytes(1),
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(fetched.responses[0].partitions[0].error_code, 0);
}

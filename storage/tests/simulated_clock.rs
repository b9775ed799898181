//! A log driven by a simulated clock: segment roll by age (`segment.ms`)
//! and retention by time (`retention.ms`) happen exactly when the manual
//! clock says, with no sleep and no dependence on the machine's time.

mod common;

use std::rc::Rc;

use common::{run, Spec};
use storage::{AppendOptions, Clock, Context, Log, ManualClock};

const T0: i64 = 1_700_000_000_000;

#[test]
fn segment_roll_and_retention_follow_the_manual_clock() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let clock = Rc::new(ManualClock::new(T0));
        let ctx = Context::new(Default::default(), clock.clone());
        let mut config = common::config(1 << 30);
        config.segment_ms = 1_000;
        config.retention_ms = 2_000;
        let log = Log::open(&ctx, &path, config).await.unwrap();
        // Every batch is stamped with the clock (LogAppendTime, as the
        // broker stamps it from the same clock): 2 records each.
        let append = |seed: u64| {
            let log = log.clone();
            let now = clock.wall_ms();
            async move {
                let options = AppendOptions {
                    log_append_time_ms: Some(now),
                    ..AppendOptions::default()
                };
                let info = log.append(Spec::new(seed, 2, 100).bytes(), options).await;
                info.unwrap().base_offset
            }
        };

        assert_eq!(append(0).await, 0); // T0
        clock.advance_ms(600);
        assert_eq!(append(1).await, 2); // T0+600: 600 ms old, same segment
        clock.advance_ms(400);
        assert_eq!(append(2).await, 4); // T0+1000: exactly segment.ms, same
        assert_eq!(log.segment_base_offsets(), vec![0]);
        clock.advance_ms(1);
        assert_eq!(append(3).await, 6); // T0+1001: past segment.ms, rolls
        assert_eq!(log.segment_base_offsets(), vec![0, 6]);
        clock.advance_ms(999);
        assert_eq!(append(4).await, 8); // T0+2000
        clock.advance_ms(2);
        assert_eq!(append(5).await, 10); // T0+2002: rolls again
        assert_eq!(log.segment_base_offsets(), vec![0, 6, 10]);

        // Retention: a segment goes once its newest record (T0+1000 for
        // the first) is more than retention.ms older than the clock.
        clock.set_wall_ms(T0 + 3_000);
        assert_eq!(log.enforce_retention().await.unwrap().segments_deleted, 0);
        clock.advance_ms(1);
        let outcome = log.enforce_retention().await.unwrap();
        assert_eq!(outcome.segments_deleted, 1);
        assert_eq!(log.segment_base_offsets(), vec![6, 10]);
        assert_eq!(log.start_offset(), 6);

        // The second (newest record T0+2000) goes after T0+4000; the active
        // segment never does.
        clock.set_wall_ms(T0 + 4_000);
        assert_eq!(log.enforce_retention().await.unwrap().segments_deleted, 0);
        clock.advance_ms(1_000_000);
        assert_eq!(log.enforce_retention().await.unwrap().segments_deleted, 1);
        assert_eq!(log.segment_base_offsets(), vec![10]);
        assert_eq!((log.start_offset(), log.next_offset()), (10, 12));
        log.close().await.unwrap();
    });
}

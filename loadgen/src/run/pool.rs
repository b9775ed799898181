//! The executor pool: one glommio executor per core, each running its
//! share of the producers and consumers and shipping measurements to the
//! main thread once a second.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};

use super::consumer::consume;
use super::producer::produce;
use super::{jobs, ConsumerJob, Control, Message, Plan, ProducerJob};
use crate::e2e::{Acknowledged, Tracker};
use crate::stats::Recorder;

/// Runs the plan on `plan.cores` executors; `on_message` sees every message
/// on the calling thread until all executors are done.
pub fn execute(
    plan: Plan,
    control: Arc<Control>,
    mut on_message: impl FnMut(Message) -> Result<()>,
) -> Result<()> {
    let plan = Arc::new(plan);
    let (producers, consumers) = jobs(&plan);
    control
        .producers_running
        .store(producers.len(), Ordering::SeqCst);
    let (tx, rx) = flume::unbounded::<Message>();
    let next_core = Arc::new(AtomicUsize::new(0));
    let cores = plan.cores;
    let handles = {
        let (plan, control) = (plan.clone(), control.clone());
        LocalExecutorPoolBuilder::new(PoolPlacement::MaxSpread(cores, allowed_cpus()))
            .spin_before_park(plan.spin)
            .on_all_shards(move || {
                let core = next_core.fetch_add(1, Ordering::SeqCst);
                let mine_p: Vec<ProducerJob> = producers
                    .iter()
                    .filter(|j| j.id as usize % cores == core)
                    .cloned()
                    .collect();
                // Consumers start on the cores after the producers'.
                let offset = producers.len();
                let mine_c: Vec<ConsumerJob> = consumers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (i + offset) % cores == core)
                    .map(|(_, j)| j.clone())
                    .collect();
                async move {
                    if let Err(e) = core_main(plan, control, mine_p, mine_c, tx.clone()).await {
                        let _ = tx.send(Message::Failed(format!("{e:#}")));
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting executors: {e}"))?
    };
    let mut result = Ok(());
    for message in rx.iter() {
        if let Err(e) = on_message(message) {
            result = Err(e);
            control.stop.store(true, Ordering::SeqCst);
        }
    }
    handles.join_all();
    result
}

async fn core_main(
    plan: Arc<Plan>,
    control: Arc<Control>,
    producers: Vec<ProducerJob>,
    consumers: Vec<ConsumerJob>,
    tx: flume::Sender<Message>,
) -> Result<()> {
    // A parked executor with runnable tasks would show as latency the
    // broker never caused: see `protocol::watchdog`.
    let _watchdog = protocol::watchdog::start(
        &format!("strom-loadgen-{}", glommio::executor().id()),
        protocol::watchdog::PERIOD,
        protocol::watchdog::STALL_WARNING,
    )
    .context("starting the executor's watchdog thread")?;
    let recorder = Rc::new(RefCell::new(Recorder::default()));
    let tracker = Rc::new(RefCell::new(Tracker::default()));
    let acknowledged: Rc<RefCell<Acknowledged>> = Rc::default();
    let finished = Rc::new(Cell::new(false));

    let reporter = spawn_reporter(plan.clone(), recorder.clone(), tx.clone(), finished.clone());

    // A failed producer or consumer is also counted as an error of the run.
    let reported = |what: &'static str, recorder: Rc<RefCell<Recorder>>, result: Result<()>| {
        if let Err(e) = &result {
            recorder.borrow_mut().error(format!("{what} failed: {e:#}"));
        }
        result
    };
    let mut tasks = Vec::new();
    for job in producers {
        let (plan, control, recorder, acknowledged) = (
            plan.clone(),
            control.clone(),
            recorder.clone(),
            acknowledged.clone(),
        );
        tasks.push(glommio::spawn_local(async move {
            let result = produce(job, plan, control.clone(), recorder.clone(), acknowledged).await;
            control.producers_running.fetch_sub(1, Ordering::SeqCst);
            reported("producer", recorder, result)
        }));
    }
    for job in consumers {
        let (plan, control, recorder, tracker) = (
            plan.clone(),
            control.clone(),
            recorder.clone(),
            tracker.clone(),
        );
        tasks.push(glommio::spawn_local(async move {
            let result = consume(job, plan, control, recorder.clone(), tracker).await;
            reported("consumer", recorder, result)
        }));
    }
    let mut first_error = None;
    for task in tasks {
        if let Err(e) = task.await {
            first_error.get_or_insert(e);
        }
    }
    finished.set(true);
    reporter.cancel().await;
    let last = std::mem::take(&mut *recorder.borrow_mut());
    let tracker = std::mem::take(&mut *tracker.borrow_mut());
    let acknowledged = std::mem::take(&mut *acknowledged.borrow_mut());
    let _ = tx.send(Message::Done {
        tracker,
        acknowledged,
        last: Box::new(last),
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
/// Ships the executor's measurements to the main thread every second,
/// aligned to the run's start, until `finished`.
fn spawn_reporter(
    plan: Arc<Plan>,
    recorder: Rc<RefCell<Recorder>>,
    tx: flume::Sender<Message>,
    finished: Rc<Cell<bool>>,
) -> glommio::Task<()> {
    glommio::spawn_local(async move {
        let mut second = 0u64;
        while !finished.get() {
            let due = plan.start + Duration::from_secs(second + 1);
            let now = Instant::now();
            if due > now {
                glommio::timer::sleep(due - now).await;
            }
            let interval = std::mem::take(&mut *recorder.borrow_mut());
            if tx
                .send(Message::Interval {
                    second,
                    recorder: Box::new(interval),
                })
                .is_err()
            {
                break;
            }
            second += 1;
        }
    })
}

/// The CPUs this process may run on (`taskset`, cgroups), for placing the
/// executors: glommio otherwise spreads them over every online CPU, so
/// `taskset -c 1 strom-loadgen` would still put its executor on CPU 0,
/// next to a broker pinned there.
fn allowed_cpus() -> Option<glommio::CpuSet> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set, which
    // sched_getaffinity fills for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    let online = glommio::CpuSet::online().ok()?;
    // SAFETY: CPU_ISSET reads a bit of the set for ids below its capacity.
    let allowed = online
        .filter(|l| l.cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(l.cpu, &set) });
    (!allowed.is_empty()).then_some(allowed)
}

//! What a process does when one of its logs fences itself. A fenced log no
//! longer trusts what it wrote (a failed fdatasync, a failed write or
//! journal write): by default it logs the reason, refuses appends and
//! acknowledgements and keeps serving what was durable. A process that
//! would rather stop than serve half a state (the broker does) installs an
//! action with [`on_fence`]; it runs once per log, on the thread of the log
//! that fenced, after the log has recorded its failure.

use std::path::Path;
use std::sync::OnceLock;

/// Called with the log's directory and the reason it fenced.
pub type FenceAction = fn(dir: &Path, reason: &str);

static ACTION: OnceLock<FenceAction> = OnceLock::new();

/// Installs `action` for every log of the process. Only the first call
/// takes effect; returns whether this one did.
pub fn on_fence(action: FenceAction) -> bool {
    ACTION.set(action).is_ok()
}

/// Runs the installed action, if any, for a log that has just fenced.
pub(crate) fn fenced(dir: &Path, reason: &str) {
    if let Some(action) = ACTION.get() {
        action(dir, reason);
    }
}

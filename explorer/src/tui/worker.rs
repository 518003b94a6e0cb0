//! Runs cells off the UI thread: one background thread per run, reporting
//! progress and the final output over a channel that the UI loop drains
//! between key presses, so the screen keeps redrawing while kernels compile.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::notebook::output::{CellOutput, Progress};

/// Name of the threads that run cells; the panic hook leaves the terminal
/// alone for them, since their panics become cell errors instead.
pub const THREAD_NAME: &str = "spindle-cell";

/// What runs one cell. The real one calls the notebook engine; tests use
/// fakes that return hand-built outputs.
pub trait Runner: Send + Sync + 'static {
    fn run(&self, source: &str, progress: &mut dyn FnMut(Progress), cancel: &AtomicBool) -> CellOutput;
}

/// A message from a running cell, tagged with the cell's id (ids survive
/// inserting and deleting cells while a run is in flight; indices do not).
#[derive(Debug)]
pub enum Msg {
    Progress(u64, Progress),
    /// Boxed: an output is large and progress messages are many.
    Done(u64, Box<CellOutput>),
}

/// Starts runs and collects their messages.
pub struct Worker {
    runner: Arc<dyn Runner>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("running", &self.cancel.is_some()).finish()
    }
}

impl Worker {
    pub fn new(runner: Arc<dyn Runner>) -> Self {
        let (tx, rx) = channel();
        Worker { runner, tx, rx, cancel: None }
    }

    /// Runs `source` on a new thread. The caller runs one cell at a time.
    pub fn start(&mut self, id: u64, source: String) {
        let cancel = Arc::new(AtomicBool::new(false));
        self.cancel = Some(cancel.clone());
        let runner = self.runner.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || {
            let progress_tx = tx.clone();
            let mut progress = move |p: Progress| {
                // The UI may have quit; nobody is left to tell.
                let _ = progress_tx.send(Msg::Progress(id, p));
            };
            let result =
                catch_unwind(AssertUnwindSafe(|| runner.run(&source, &mut progress, cancel.as_ref())));
            let output = result.unwrap_or_else(|payload| {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                CellOutput {
                    error: Some(format!("internal error: the engine panicked: {message}")),
                    ..CellOutput::default()
                }
            });
            let _ = tx.send(Msg::Done(id, Box::new(output)));
        });
        if let Err(e) = spawned {
            let output =
                CellOutput { error: Some(format!("could not start a thread: {e}")), ..CellOutput::default() };
            let _ = self.tx.send(Msg::Done(id, Box::new(output)));
        }
    }

    /// Asks the running cell to stop; the engine checks the flag between
    /// steps and returns what it finished, marked cancelled.
    pub fn cancel(&self) {
        if let Some(flag) = &self.cancel {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Called when a run's `Done` arrived.
    pub fn finished(&mut self) {
        self.cancel = None;
    }

    pub fn try_recv(&self) -> Option<Msg> {
        self.rx.try_recv().ok()
    }

    /// Waits up to `timeout` for a message (tests, and nothing else, block).
    #[cfg(test)]
    pub fn recv_timeout(&self, timeout: std::time::Duration) -> Option<Msg> {
        self.rx.recv_timeout(timeout).ok()
    }
}

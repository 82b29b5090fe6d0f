//! The thread a `python` stage's code runs on, and the stop deadline. The
//! stage hands each call (`process(frame)`, `finish()`) to this thread and
//! waits for it. Once the run is stopping (Ctrl-C, SIGTERM, `on_error =
//! "stop"`), a call still running `stop_timeout_ms` later is given up on:
//! its frame fails, and so does every later call of the stage, at once, so
//! the pipeline drains and exits. CPython cannot stop a thread from outside:
//! the abandoned call goes on running until the process exits.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};

use crate::runtime::Shutdown;

/// What a call gives back: `process`'s result as JSON text (or `None`), or the error.
pub type Answer = Result<Option<String>, String>;
/// One call into Python, run on the stage's thread.
pub type Job = Box<dyn FnOnce() -> Answer + Send>;

/// How often a waiting stage looks at the stop.
const POLL: Duration = Duration::from_millis(50);

pub struct Worker {
    stage: Arc<str>,
    /// `plugins/x.py:process` as written.
    shown: String,
    jobs: Sender<Job>,
    answers: Receiver<Answer>,
    shutdown: Option<Arc<Shutdown>>,
    timeout: Duration,
    /// When a waiting call first saw the stop.
    stop_seen: Option<Instant>,
    /// Set once a call was abandoned: why every later call fails.
    abandoned: Option<String>,
}

impl Worker {
    /// Start stage `stage`'s thread; `shutdown`: the run's stop (none: calls are never abandoned).
    pub fn start(stage: Arc<str>, shown: String, shutdown: Option<Arc<Shutdown>>, timeout: Duration) -> std::io::Result<Self> {
        let (jobs, rx) = bounded::<Job>(1);
        let (tx, answers) = bounded::<Answer>(1);
        std::thread::Builder::new().name(format!("python {stage}")).spawn(move || {
            for job in rx {
                let answer = catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|p| {
                    let text = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                    Err(format!("panic: {}", text.unwrap_or_default()))
                });
                if tx.send(answer).is_err() {
                    break;
                }
            }
        })?;
        Ok(Worker { stage, shown, jobs, answers, shutdown, timeout, stop_seen: None, abandoned: None })
    }

    /// Run `job` on the stage's thread and wait for it; `at` names the frame
    /// in the messages (``stream `cam` frame 3``, or `the end of the input`).
    pub fn call(&mut self, at: &str, job: Job) -> Answer {
        if let Some(why) = &self.abandoned {
            return Err(why.clone());
        }
        self.jobs.send(job).map_err(|_| "the stage's Python thread has ended".to_string())?;
        loop {
            match self.answers.recv_timeout(POLL) {
                Ok(answer) => return answer,
                Err(RecvTimeoutError::Disconnected) => return Err("the stage's Python thread has ended".into()),
                Err(RecvTimeoutError::Timeout) => {
                    if !self.shutdown.as_ref().is_some_and(|s| s.stopping()) {
                        continue;
                    }
                    let seen = *self.stop_seen.get_or_insert_with(Instant::now);
                    if seen.elapsed() < self.timeout {
                        continue;
                    }
                    let (stage, shown, ms) = (&self.stage, &self.shown, self.timeout.as_millis());
                    tracing::error!(
                        "stage `{stage}`: {at}: {shown} was still running {ms} ms after the stop (stop_timeout_ms): \
                         abandoned; the frame fails, and so do the stage's later frames (Python cannot interrupt \
                         a call: it goes on until the process exits)"
                    );
                    self.abandoned = Some(format!("not run: {shown} never returned on {at} after the stop (abandoned)"));
                    return Err(format!("{shown} was still running {ms} ms after the stop: abandoned"));
                }
            }
        }
    }
}

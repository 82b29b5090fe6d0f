//! Ends of streams, for sources with many inputs (a `dir` source: one stream
//! per file). When an input has ended (the source is done with it and none
//! of its frames is held anywhere), every running sink is told to close that
//! stream (flush, close its per-stream file); once all sinks have, the
//! source's callback learns whether the stream's results are complete.
//! Every node's per-stream counters learn of the end too, so that a long batch
//! keeps only its most recent ended streams listed one by one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender, unbounded};

use super::NodeStats;

/// Called once per ended stream: `true` when every sink closed it without error.
pub type OnFlushed = Box<dyn FnOnce(bool) + Send>;

struct Pending {
    /// Sinks that have not closed the stream yet.
    waiting: Vec<bool>,
    ok: bool,
    done: OnFlushed,
}

#[derive(Default)]
struct State {
    /// One per sink; `None` once the sink finished (it flushed everything).
    sinks: Vec<Option<Sender<Arc<str>>>>,
    pending: HashMap<Arc<str>, Pending>,
}

/// Hands ended streams to the sinks and collects their acknowledgements.
#[derive(Default)]
pub struct StreamEnds {
    state: Mutex<State>,
    /// Every node's counters, told when a stream has ended.
    nodes: Vec<Arc<NodeStats>>,
}

impl StreamEnds {
    /// A hub for `sinks` sinks, and the receiver each sink reads ended streams
    /// from; `nodes`: the counters of every node, told of each end.
    pub fn new(sinks: usize, nodes: Vec<Arc<NodeStats>>) -> (Arc<Self>, Vec<Receiver<Arc<str>>>) {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..sinks).map(|_| unbounded()).unzip();
        let hub = StreamEnds { state: Mutex::new(State { sinks: txs.into_iter().map(Some).collect(), pending: HashMap::new() }), nodes };
        (Arc::new(hub), rxs)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `stream` has ended: ask every running sink to close it; `done` runs when all have.
    pub fn ended(&self, stream: Arc<str>, done: OnFlushed) {
        // No frame of it is left anywhere: no node counts it again.
        for n in &self.nodes {
            n.stream_ended(&stream);
        }
        let mut st = self.lock();
        let waiting: Vec<bool> = st.sinks.iter().map(|s| s.as_ref().is_some_and(|tx| tx.send(stream.clone()).is_ok())).collect();
        if waiting.iter().any(|w| *w) {
            st.pending.insert(stream, Pending { waiting, ok: true, done });
        } else {
            drop(st);
            done(true);
        }
    }

    /// Sink `sink` closed `stream` (`ok`: without error).
    pub fn closed(&self, sink: usize, stream: &str, ok: bool) {
        let mut st = self.lock();
        let Some(p) = st.pending.get_mut(stream) else { return };
        p.waiting[sink] = false;
        p.ok &= ok;
        if p.waiting.iter().any(|w| *w) {
            return;
        }
        let p = st.pending.remove(stream).expect("present above");
        drop(st);
        (p.done)(p.ok);
    }

    /// Sink `sink` finished (flushed and closed everything, `ok`: without error).
    pub fn sink_finished(&self, sink: usize, ok: bool) {
        let mut st = self.lock();
        st.sinks[sink] = None;
        let mut done = Vec::new();
        let keys: Vec<Arc<str>> = st.pending.keys().cloned().collect();
        for k in keys {
            let p = st.pending.get_mut(&k).expect("listed above");
            if std::mem::replace(&mut p.waiting[sink], false) {
                p.ok &= ok;
            }
            if !p.waiting.iter().any(|w| *w) {
                done.push(st.pending.remove(&k).expect("listed above"));
            }
        }
        drop(st);
        for p in done {
            (p.done)(p.ok);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_flushed_once_every_sink_closed_it() {
        let (hub, rxs) = StreamEnds::new(2, Vec::new());
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        hub.ended("a".into(), Box::new(move |ok| g.lock().unwrap().push(("a", ok))));
        assert_eq!(&*rxs[0].try_recv().unwrap(), "a");
        assert_eq!(&*rxs[1].try_recv().unwrap(), "a");
        hub.closed(0, "a", true);
        assert!(got.lock().unwrap().is_empty());
        // The second sink finishes without reading its message: finishing closes every stream.
        hub.sink_finished(1, true);
        assert_eq!(*got.lock().unwrap(), [("a", true)]);
        // With no sink left running, a stream is flushed at once.
        hub.sink_finished(0, true);
        let g = got.clone();
        hub.ended("b".into(), Box::new(move |ok| g.lock().unwrap().push(("b", ok))));
        assert_eq!(got.lock().unwrap().len(), 2);
    }

    /// Ends reach every node's counters: a long batch's ended streams are
    /// folded there, the most recent ones still listed.
    #[test]
    fn ended_streams_are_folded_in_every_node() {
        let nodes: Vec<Arc<NodeStats>> =
            ["src", "det", "out"].iter().map(|n| Arc::new(NodeStats::new(n, "x", crate::config::Role::Stage))).collect();
        let (hub, _rxs) = StreamEnds::new(0, nodes.clone());
        let extra = 5;
        for i in 0..super::super::stats::LISTED_ENDED_STREAMS + extra {
            let s: Arc<str> = format!("f{i}").into();
            for n in &nodes {
                n.stream(&s, super::super::stats::StreamEvent::In);
            }
            hub.ended(s, Box::new(|_| {}));
        }
        for n in &nodes {
            assert_eq!(n.stream_counts().len(), super::super::stats::LISTED_ENDED_STREAMS, "{}", n.name);
            assert_eq!(n.folded_streams().streams, extra as u64, "{}", n.name);
        }
    }

    #[test]
    fn a_sink_error_marks_the_stream_unflushed() {
        let (hub, _rxs) = StreamEnds::new(1, Vec::new());
        let got = Arc::new(Mutex::new(None));
        let g = got.clone();
        hub.ended("a".into(), Box::new(move |ok| *g.lock().unwrap() = Some(ok)));
        hub.closed(0, "a", false);
        assert_eq!(*got.lock().unwrap(), Some(false));
    }
}

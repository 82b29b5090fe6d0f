//! infer-stream: real-time video inference pipelines declared in one TOML file.
//!
//! The crate is split the way data flows:
//! - [`config`] reads a pipeline TOML into typed node configs, with every error located;
//! - [`graph`] checks the whole graph (inputs, cycles, data types, models) before anything runs;
//! - [`runtime`] runs one thread per node over bounded channels, with accounting and shutdown;
//! - [`frame`] is what flows: a decoded image, its metadata and the results stages attach;
//! - [`stages`] are the sources, preprocess, inference, postprocess and sinks;
//! - [`gating`] decides which frames an inference stage runs on (interval, motion);
//! - [`track`] follows detected objects from frame to frame (ByteTrack);
//! - [`analytics`] counts tracks crossing lines and entering and leaving zones;
//! - [`bus`] delivers results to message brokers (Kafka, MQTT): memory buffer, disk spool, accounting;
//! - [`metrics`] serves those same counters to Prometheus, with health checks;
//! - [`features`] says which optional capabilities (cargo features) this build has;
//! - [`backend`] wraps FFmpeg, ONNX Runtime, CUDA and GStreamer: the only place with `unsafe`.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]

pub mod analytics;
#[cfg(feature = "serve")]
pub mod api;
#[allow(unsafe_code)]
pub mod backend;
pub mod bench;
pub mod bus;
pub mod capacity;
pub mod config;
pub mod doctor;
pub mod features;
pub mod frame;
pub mod gating;
#[cfg(feature = "cuda")]
pub mod gpu_check;
pub mod graph;
pub mod metrics;
pub mod runtime;
pub mod stages;
pub mod track;

/// Paths to bundled test data: under the source tree, or (for a test binary
/// copied to another machine) under the current directory.
#[cfg(all(test, feature = "cuda"))]
pub(crate) mod test_support {
    use std::path::PathBuf;

    pub fn sample(name: &str) -> PathBuf {
        let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples").join(name);
        if built.exists() { built } else { PathBuf::from("samples").join(name) }
    }
}

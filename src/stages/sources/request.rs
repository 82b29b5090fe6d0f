//! `kind = "request"`: pictures sent to `infer-stream serve` (`POST
//! /v1/infer`, gRPC `Infer`), one frame per request. The source takes
//! requests from its [`RequestHub`], decodes each picture (JPEG or PNG, by
//! FFmpeg, as an `image_sequence` would) and sends it on as a frame whose
//! `seq` is the request's number; the runtime answers the request when a
//! sink has written that frame. A picture that cannot be decoded is answered
//! with what is wrong with it and never enters the pipeline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Diagnostic, NodeConfig, PipelineConfig, RequestSourceConfig};
use crate::frame::{InputToken, Pool};
use crate::runtime::SourceCtx;
use crate::runtime::request::{RequestError, RequestHub, RequestLimits};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Source};

pub struct RequestSource {
    hub: RequestHub,
    max_pixels: u64,
    pool: Pool<u8>,
    /// Timestamps count milliseconds from the source's start.
    started: Instant,
}

impl RequestSource {
    pub fn build(cfg: &PipelineConfig, node: &NodeConfig, c: &RequestSourceConfig, pool_size: usize) -> Result<Self, Diagnostic> {
        for (v, span, what) in [
            (*c.max_waiting.get_ref() as u64, c.max_waiting.span(), "max_waiting"),
            (*c.timeout_ms.get_ref(), c.timeout_ms.span(), "timeout_ms"),
            (*c.max_bytes.get_ref() as u64, c.max_bytes.span(), "max_bytes"),
        ] {
            if v == 0 {
                return Err(cfg.diag(span, format!("source `{}`: `{what}` must be positive", node.name)));
            }
        }
        let limits = RequestLimits {
            queue: *c.max_waiting.get_ref(),
            timeout: Duration::from_millis(*c.timeout_ms.get_ref()),
            max_bytes: *c.max_bytes.get_ref(),
        };
        Ok(RequestSource {
            hub: RequestHub::new(Arc::from(node.name.as_str()), limits),
            max_pixels: c.max_pixels.or(cfg.settings.max_pixels).unwrap_or(crate::backend::ffmpeg::DEFAULT_MAX_PIXELS),
            // Queued requests are encoded bytes; only pictures in flight hold decoded buffers.
            pool: Pool::new(pool_size),
            started: Instant::now(),
        })
    }

    /// The handle requests are submitted through.
    pub fn hub(&self) -> &RequestHub {
        &self.hub
    }
}

impl Source for RequestSource {
    fn describe(&self) -> String {
        let l = self.hub.limits();
        format!(
            "requests to `infer-stream serve` (queue of {}, deadline {} ms, pictures up to {} bytes)",
            l.queue,
            l.timeout.as_millis(),
            l.max_bytes
        )
    }

    /// Requests come and go: the service is ready without one.
    fn required(&self) -> bool {
        false
    }

    fn request_hub(&self) -> Option<RequestHub> {
        Some(self.hub.clone())
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let mut bad = 0u64;
        while !ctx.stopping() {
            let Some(req) = self.hub.next(Duration::from_millis(50)) else { continue };
            let image = match crate::backend::ffmpeg::decode_picture(&req.image, self.max_pixels, &self.pool) {
                Ok(image) => image,
                Err(e) => {
                    bad += 1;
                    ctx.set_decode_errors(bad, bad);
                    tracing::debug!("source `{}`: request {}: {e}", ctx.name, req.id);
                    self.hub.answer(req.id, Err(RequestError::BadImage(e)));
                    continue;
                }
            };
            let (hub, id) = (self.hub.clone(), req.id);
            // The frame's ticket holds the token: it ends once the frame has settled everywhere.
            let token = InputToken::new(ctx.name.clone(), Box::new(move |end| hub.settled(id, &end)));
            let pts = self.started.elapsed().as_millis() as i64;
            let frame = ctx.new_frame_of(&token, req.id, Some(pts), (1, 1000), Some(Arc::new(image)));
            drop(token);
            if !ctx.emit(frame) {
                break;
            }
        }
        self.hub.close();
        Ok(())
    }
}

impl Build for RequestSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        RequestSource::build(cx.cfg, cx.node, self, cx.pool_size).map(|s| Body::Source(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::frame::Accounting;
    use crate::runtime::request::RequestError;
    use crate::runtime::{Pipeline, Shutdown};

    const PIPELINE: &str = r#"
[sources.req]
kind = "request"
max_waiting = 4
timeout_ms = 5000

[stages.pre]
kind = "preprocess"
inputs = ["req"]
width = 64
height = 48

[sinks.out]
kind = "null"
inputs = ["pre"]
"#;

    /// A 2x1 PNG (a red and a blue pixel): signature, IHDR, IDAT, IEND.
    fn png_2x1() -> Vec<u8> {
        let hex = concat!(
            "89504e470d0a1a0a0000000d49484452000000020000000108020000007b40e8dd",
            "0000000d49444154789c63f8cf0004ff01070001ffe2239e590000000049454e44ae426082"
        );
        let png: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let pool = crate::frame::Pool::new(1);
        let decoded = crate::backend::ffmpeg::decode_picture(&png, 100, &pool).expect("the test PNG decodes");
        assert_eq!((decoded.width, decoded.height), (2, 1));
        assert!(crate::backend::ffmpeg::decode_picture(&png, 1, &pool).unwrap_err().contains("over the limit of 1 pixels"));
        png
    }

    /// Requests go through a real pipeline and come back with their frame's
    /// JSON; a bad picture, a huge one and a full queue are refused with why.
    #[test]
    fn requests_are_answered_with_their_frames_results() {
        let png = png_2x1();
        let cfg = crate::config::parse(Path::new("/tmp/request-test.toml"), PIPELINE.into()).expect("config");
        let graph = crate::graph::check(&cfg).expect("graph");
        let (bodies, _) = crate::stages::build(&cfg, &graph, &Default::default()).expect("build");
        let pipeline = Pipeline::new(&cfg, graph, bodies);
        let hub = pipeline.request_hubs().pop().expect("a request hub");
        assert_eq!(&**hub.name(), "req");
        let (shutdown, acct) = (Shutdown::new(), std::sync::Arc::new(Accounting::default()));
        let sd = shutdown.clone();
        let a = acct.clone();
        let run = std::thread::spawn(move || pipeline.run(sd, a, None));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let replies: Vec<_> = rt.block_on(async {
            let pending: Vec<_> = (0..3).map(|_| hub.submit(png.clone(), None).unwrap()).collect();
            let mut out = Vec::new();
            for p in pending {
                out.push(p.wait().await);
            }
            out
        });
        for (i, r) in replies.iter().enumerate() {
            let r = r.as_ref().expect("answered");
            assert_eq!((r.width, r.height), (2, 1));
            assert_eq!(r.json["stream"], "req");
            assert_eq!(r.json["seq"], i as u64, "{}", r.json);
            assert_eq!(r.json["width"], 2);
        }
        let bad = rt.block_on(hub.submit(b"GIF89a not a picture".to_vec(), None).unwrap().wait());
        match bad {
            Err(RequestError::BadImage(why)) => assert!(why.contains("not a JPEG or PNG"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut cut = png.clone();
        cut.truncate(45);
        match rt.block_on(hub.submit(cut, None).unwrap().wait()) {
            Err(RequestError::BadImage(why)) => assert!(why.contains("cannot be decoded"), "{why}"),
            other => panic!("{other:?}"),
        }
        shutdown.stop();
        let report = run.join().unwrap();
        assert!(acct.snapshot().balanced(), "{:?}", acct.snapshot());
        assert_eq!(acct.snapshot().processed, 3);
        assert_eq!(hub.submit(png, None).err(), Some(RequestError::Stopped));
        drop(report);
    }
}

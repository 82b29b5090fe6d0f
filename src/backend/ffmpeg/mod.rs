//! FFmpeg through ffmpeg-next: demux + decode into pooled host images, and
//! swscale on pooled buffers for the CPU preprocess. This file owns the
//! module's error type and the option dictionary helper, and re-exports the
//! pieces, one file per concern:
//!
//! - `setup`: one-time initialisation, FFmpeg's log into ours, what the build offers;
//! - `input`: opening inputs (named demuxers, stdin, the interrupt), input names;
//! - `decode`: the video decoder (corrupt data, truncation) and still pictures in memory;
//! - `hw`: NVDEC: the CUDA device FFmpeg decodes on and the decoded frames' device planes;
//! - `picture`: decoded frames into pooled host images, and quarter turns;
//! - `scale`: swscale;
//! - `audio`: the audio decoder and resampler;
//! - `encode`: choosing and opening video encoders, device pictures for NVENC;
//! - `output`: the encoder + muxer writing a file, stdout or a server;
//! - `remux`: event clips' packets copied into fragmented mp4;
//! - `reencode`: event clips re-encoded, packets for the same muxer.

mod audio;
mod decode;
mod encode;
mod hw;
mod input;
mod output;
mod picture;
mod reencode;
mod remux;
mod scale;
mod setup;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod turn_tests;

pub use audio::AudioDecoder;
pub use decode::{StreamInfo, Truncation, VideoDecoder, decode_picture};
pub use encode::{ChosenEncoder, DeviceFrames, EncoderSettings, check_video_encoder, choose_encoder};
pub use hw::{CudaPlanes, HELD_SURFACES, HwDevice, cuda_planes, frame_ref};
pub use input::{DEFAULT_MAX_PIXELS, InputOptions, Interrupt, input_format_exists, pixel_format_exists, shown_name};
pub use output::{OutputSpec, VideoEncoder};
pub use picture::{copy_to_image, turn_image, turn_picture};
pub use reencode::ClipEncoder;
pub use remux::{ClipMuxer, PacketTap, StreamParams, TappedPacket};
pub use scale::{Scaler, sws_flags};
pub use setup::{hwaccels, init, versions};

use ff::format::Pixel;
use ffmpeg_next as ff;

#[derive(Debug, thiserror::Error)]
pub enum FfmpegError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: ff::Error },
    /// The pipeline stopped while FFmpeg was still opening the input (waiting
    /// for a pipe's first bytes, or for enough of them to know the streams):
    /// a stop, not a fault.
    #[error("{path}: stopped while the input was being opened")]
    Stopped { path: String },
    #[error("{path}: no video stream")]
    NoVideo { path: String },
    #[error("{path}: no audio stream")]
    NoAudio { path: String },
    #[error("{path}: cannot create a decoder for codec `{codec}`: {source}")]
    Decoder { path: String, codec: String, source: ff::Error },
    #[error("{path}: frame {frame}: {what}")]
    Frame { path: String, frame: u64, what: String },
    #[error("{path}: NVDEC: {what}")]
    Hw { path: String, what: String },
    #[error("{path}: frame size {width}x{height} ({} pixels) exceeds the limit of {limit} pixels", *width as u64 * *height as u64)]
    TooLarge { path: String, width: u32, height: u32, limit: u64 },
    #[error("swscale: cannot convert {from:?} {src_w}x{src_h} to {to:?} {dst_w}x{dst_h}")]
    Scaler { from: Pixel, to: Pixel, src_w: u32, src_h: u32, dst_w: u32, dst_h: u32 },
}

impl FfmpegError {
    /// The server refused the credentials (HTTP or RTSP `401 Unauthorized`).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, FfmpegError::Open { source: ff::Error::HttpUnauthorized, .. })
    }
}

fn dictionary(options: &[(String, String)]) -> ff::Dictionary<'static> {
    let mut d = ff::Dictionary::new();
    for (k, v) in options {
        d.set(k, v);
    }
    d
}

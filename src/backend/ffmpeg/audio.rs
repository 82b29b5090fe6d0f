//! Audio decode: a demuxer + audio decoder + resampler to mono f32 at a
//! fixed rate, for an audio file, a video's audio track or raw samples.

use std::path::Path;

use ff::ffi;
use ffmpeg_next as ff;

use super::FfmpegError;
use super::input::{InputOptions, NonBlockingStdin, Opened, open_input, shown_name};

/// A demuxer + audio decoder + resampler to mono f32 at a fixed rate.
pub struct AudioDecoder {
    path: String,
    input: ff::format::context::Input,
    stream_index: usize,
    decoder: ff::decoder::Audio,
    resampler: Option<ff::software::resampling::Context>,
    rate: u32,
    frame: ff::frame::Audio,
    eof_sent: bool,
    flushed: bool,
    pub corrupt_packets: u64,
    /// Why reading stopped, when it was not the end of the input (a network
    /// stream that went silent, a truncated file, a stop).
    pub read_error: Option<String>,
    /// Codec, source rate and channels, for the start-up log.
    pub describe: String,
    /// Duration in seconds, when the container says.
    pub duration: Option<f64>,
    /// Last, so stdin's mode comes back after the input is closed.
    _stdin: Option<NonBlockingStdin>,
}

impl AudioDecoder {
    /// Open the best audio stream of `path` (an audio file or a video's audio track,
    /// `-` for stdin), resampled to `rate` Hz mono.
    pub fn open(path: &Path, rate: u32) -> Result<Self, FfmpegError> {
        Self::open_with(path, rate, &InputOptions::default())
    }

    /// As [`AudioDecoder::open`], with a named demuxer (e.g. raw `s16le`) and its options.
    pub fn open_with(path: &Path, rate: u32, opts: &InputOptions) -> Result<Self, FfmpegError> {
        let p = shown_name(path);
        let Opened { input, stdin } = open_input(path, opts)?;
        let stream = input.streams().best(ff::media::Type::Audio).ok_or_else(|| FfmpegError::NoAudio { path: p.clone() })?;
        let stream_index = stream.index();
        let codec_id = stream.parameters().id();
        let ctx = ff::codec::context::Context::from_parameters(stream.parameters()).map_err(|source| FfmpegError::Decoder {
            path: p.clone(),
            codec: format!("{codec_id:?}"),
            source,
        })?;
        let decoder =
            ctx.decoder().audio().map_err(|source| FfmpegError::Decoder { path: p.clone(), codec: format!("{codec_id:?}"), source })?;
        let duration = (input.duration() > 0).then(|| input.duration() as f64 / ffi::AV_TIME_BASE as f64);
        let codec = ff::codec::decoder::find(codec_id).map(|c| c.name().to_string()).unwrap_or_else(|| format!("{codec_id:?}"));
        let describe = format!("{codec} {} Hz, {} channel(s) → {rate} Hz mono f32", decoder.rate(), decoder.channels());
        Ok(AudioDecoder {
            path: p,
            input,
            stream_index,
            decoder,
            resampler: None,
            rate,
            frame: ff::frame::Audio::empty(),
            eof_sent: false,
            flushed: false,
            corrupt_packets: 0,
            read_error: None,
            describe,
            duration,
            _stdin: stdin,
        })
    }

    fn resample(&mut self, out: &mut Vec<f32>) -> Result<(), FfmpegError> {
        let f = &mut self.frame;
        if f.channel_layout().is_empty() {
            f.set_channel_layout(ff::ChannelLayout::default(f.channels() as i32));
        }
        if self.resampler.is_none() {
            let r = ff::software::resampling::Context::get(
                f.format(),
                f.channel_layout(),
                f.rate(),
                ff::format::Sample::F32(ff::format::sample::Type::Packed),
                ff::ChannelLayout::MONO,
                self.rate,
            )
            .map_err(|e| FfmpegError::Frame { path: self.path.clone(), frame: 0, what: format!("cannot resample: {e}") })?;
            self.resampler = Some(r);
        }
        let r = self.resampler.as_mut().expect("set above");
        let cap = f.samples() * self.rate as usize / f.rate().max(1) as usize + 1024;
        let mut o = ff::frame::Audio::new(ff::format::Sample::F32(ff::format::sample::Type::Packed), cap, ff::ChannelLayout::MONO);
        r.run(f, &mut o).map_err(|e| FfmpegError::Frame { path: self.path.clone(), frame: 0, what: format!("resampling: {e}") })?;
        out.extend_from_slice(&o.plane::<f32>(0)[..o.samples()]);
        Ok(())
    }

    /// Append the next decoded samples to `out`; `false` at the end of the stream.
    pub fn read(&mut self, out: &mut Vec<f32>) -> Result<bool, FfmpegError> {
        loop {
            match self.decoder.receive_frame(&mut self.frame) {
                Ok(()) => {
                    self.resample(out)?;
                    return Ok(true);
                }
                Err(ff::Error::Eof) => {
                    if !self.flushed {
                        self.flushed = true;
                        if let Some(r) = self.resampler.as_mut() {
                            let mut o = ff::frame::Audio::new(
                                ff::format::Sample::F32(ff::format::sample::Type::Packed),
                                8192,
                                ff::ChannelLayout::MONO,
                            );
                            if r.flush(&mut o).is_ok() {
                                out.extend_from_slice(&o.plane::<f32>(0)[..o.samples()]);
                            }
                        }
                        return Ok(true);
                    }
                    return Ok(false);
                }
                Err(ff::Error::Other { errno }) if errno == ffi::EAGAIN => {}
                Err(e) => {
                    self.corrupt_packets += 1;
                    tracing::debug!(path = %self.path, error = %e, "audio decode error");
                    continue;
                }
            }
            if self.eof_sent {
                if self.flushed {
                    return Ok(false);
                }
                continue;
            }
            let mut packet = ff::Packet::empty();
            loop {
                match packet.read(&mut self.input) {
                    Ok(()) if packet.stream() == self.stream_index => {
                        if self.decoder.send_packet(&packet).is_err() {
                            self.corrupt_packets += 1;
                        }
                        break;
                    }
                    Ok(()) => continue,
                    Err(e) => {
                        if e != ff::Error::Eof {
                            self.read_error = Some(e.to_string());
                        }
                        let _ = self.decoder.send_eof();
                        self.eof_sent = true;
                        break;
                    }
                }
            }
        }
    }
}

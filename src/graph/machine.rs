//! Checks against this machine, made by `validate` and by a run before it
//! loads anything: the node kinds this build has, the GPU a part demands, output folders that can be
//! written, and the elements of a GStreamer launch line.

use std::collections::HashMap;
use std::path::Path;

use crate::config::{ComputeDevice, DecodeBackend, Diagnostics, HwAccel, NodeKind, PipelineConfig, ProviderName};

/// Every part of the pipeline this machine cannot run or write, located
/// (`outputs`: also the sinks' files, which `bench --null-sinks` never writes).
pub fn check_machine(cfg: &PipelineConfig, outputs: bool) -> Diagnostics {
    let mut diags = Diagnostics::default();
    crate::features::check_nodes(cfg, &mut diags);
    check_devices(cfg, &mut diags);
    if outputs {
        check_outputs(cfg, &mut diags);
    }
    #[cfg(feature = "gstreamer")]
    check_launch_lines(cfg, &mut diags);
    diags.sort();
    diags
}

/// Why CUDA device `device` cannot be used here, if it cannot (the words a run would use).
fn gpu_error(device: usize) -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        crate::backend::cuda::Gpu::shared(device).err().map(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        Some("this build has no GPU support (built without the `cuda` feature)".into())
    }
}

/// `hwaccel = "cuda"`, `device = "cuda"` and required GPU providers need a GPU:
/// without one, say so before models load (a run would fail after loading them).
fn check_devices(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    let mut seen: HashMap<usize, Option<String>> = HashMap::new();
    let mut gpu = |device: usize| seen.entry(device).or_insert_with(|| gpu_error(device)).clone();
    const DOCTOR: &str = "`infer-stream doctor` says what this machine has";
    for node in &cfg.nodes {
        match &node.kind {
            NodeKind::File(c) if *c.backend.get_ref() == DecodeBackend::Ffmpeg => {
                if let Some(h) = &c.hwaccel
                    && *h.get_ref() == HwAccel::Cuda
                    && let Some(e) = gpu(c.device_id)
                {
                    diags.push(
                        cfg.diag(h.span(), format!("source `{}`: hwaccel = \"cuda\": {e}", node.name))
                            .with_help(format!("use hwaccel = \"auto\" to fall back to software decoding; {DOCTOR}")),
                    );
                }
            }
            NodeKind::Preprocess(c) => {
                if let Some(d) = &c.device
                    && *d.get_ref() == ComputeDevice::Cuda
                    && let Some(e) = gpu(c.device_id)
                {
                    diags.push(
                        cfg.diag(d.span(), format!("stage `{}`: device = \"cuda\": {e}", node.name))
                            .with_help(format!("use device = \"auto\" (the GPU for NVDEC frames only) or \"cpu\"; {DOCTOR}")),
                    );
                }
            }
            NodeKind::Infer(c) => {
                for p in c.providers.get_ref().iter().filter(|p| p.required && p.name != ProviderName::Cpu) {
                    if let Some(e) = usize::try_from(p.device_id).ok().and_then(&mut gpu) {
                        diags.push(
                            cfg.diag(
                                c.providers.span(),
                                format!("stage `{}`: required execution provider `{}` is not available: {e}", node.name, p.name),
                            )
                            .with_help(format!("drop `required = true` to fall back to the next provider listed; {DOCTOR}")),
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// Each sink's output folder must take files: an existing file must open for
/// writing; otherwise a probe file is made and removed in the folder (or in
/// the nearest existing folder above it, where the sink would make it).
/// URLs (`udp://`, `rtmp://`, ...) and stdout are not files.
fn check_outputs(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        let (value, folder) = match &node.kind {
            NodeKind::Ndjson(c) => (&c.path, false),
            NodeKind::Subtitles(c) => (&c.path, false),
            NodeKind::Video(c) => (&c.path, false),
            NodeKind::Images(c) => (&c.folder, true),
            _ => continue,
        };
        let (Ok(text), Ok(path)) = (cfg.expand(value), cfg.resolve_path(value)) else { continue };
        if text == "-" || text.contains("://") {
            continue;
        }
        let templated = text.contains("{stream}");
        let result = if !folder && !templated && path.exists() && !path.is_dir() {
            std::fs::OpenOptions::new().append(true).open(&path).map(drop).map_err(|e| (path.clone(), e))
        } else {
            let dir = if folder { Some(path.as_path()) } else { path.parent() };
            match dir.into_iter().flat_map(Path::ancestors).find(|a| !a.as_os_str().is_empty() && a.is_dir()) {
                Some(existing) => probe_folder(existing).map_err(|e| (existing.to_path_buf(), e)),
                None => Ok(()),
            }
        };
        if let Err((at, e)) = result {
            diags.push(
                cfg.diag(value.span(), format!("sink `{}`: cannot write {}: {e}", node.name, at.display()))
                    .with_help("choose a folder this user can write (missing folders are made)"),
            );
        }
    }
}

/// Make and remove a file in `dir`: whether files can be made there.
fn probe_folder(dir: &Path) -> std::io::Result<()> {
    for n in 0..100u32 {
        let probe = dir.join(format!(".infer-stream-write-check-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(f) => {
                drop(f);
                return std::fs::remove_file(&probe);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A GStreamer `launch` line must parse, and every element it names must be
/// installed: the error names the element and points at it in the line.
#[cfg(feature = "gstreamer")]
fn check_launch_lines(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    use crate::backend::gstreamer::{LineError, check_line, launch_line};
    for node in &cfg.nodes {
        let NodeKind::File(c) = &node.kind else { continue };
        let Some(launch) = c.launch.as_ref().filter(|_| *c.backend.get_ref() == DecodeBackend::Gstreamer) else { continue };
        let (Ok(uri), Ok(fragment)) = (cfg.expand(&c.uri), cfg.expand(launch)) else { continue };
        let input = if crate::config::is_url(&uri) || uri == "-" {
            uri
        } else {
            cfg.resolve_path(&c.uri).map(|p| p.display().to_string()).unwrap_or(uri)
        };
        match check_line(&launch_line(&input, Some(&fragment))) {
            Ok(()) => {}
            Err(LineError::Missing(names)) => {
                for name in names {
                    // The element's own place in the line, when it is written there as is.
                    let span = launch.span();
                    let written = cfg.source.get(span.clone()).and_then(|t| t.find(name.as_str()).map(|i| span.start + i));
                    let at = written.map_or(span.clone(), |i| i..i + name.len());
                    diags.push(
                        cfg.diag(at, format!("source `{}`: GStreamer has no element `{name}`", node.name))
                            .with_help("check the name with gst-inspect-1.0; a missing element comes with its plugin package (e.g. gstreamer1.0-plugins-good, -bad, -ugly, -libav)"),
                    );
                }
            }
            Err(LineError::Invalid(e)) => diags.push(
                cfg.diag(launch.span(), format!("source `{}`: GStreamer cannot parse the launch line: {e}", node.name))
                    .with_help("check the launch line with gst-launch-1.0"),
            ),
        }
    }
}

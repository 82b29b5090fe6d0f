//! `inspect` (a model's inputs, outputs and metadata) and `doctor --gpu-check`.

use std::path::Path;

use anyhow::Result;

use super::exit;

/// `doctor --gpu-check`: run the GPU self-check and print its figures.
pub(super) fn run_gpu_check(video: &Path, soak_frames: usize, json: bool) -> anyhow::Result<u8> {
    #[cfg(feature = "cuda")]
    {
        println!("\nGPU check on {} ({soak_frames} soak frames):", video.display());
        let r = infer_stream::gpu_check::run(video, soak_frames, 0).map_err(|e| anyhow::anyhow!("GPU check: {e}"))?;
        if json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
        println!("{r}");
        Ok(if r.failures.is_empty() { exit::OK } else { exit::RUNTIME })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (video, soak_frames, json);
        anyhow::bail!("GPU check: this build has no GPU support (built without the `cuda` feature)")
    }
}

pub(super) fn inspect(model: &Path, json: bool, ort_library: Option<&Path>) -> Result<u8> {
    if !model.is_file() {
        let why = if model.is_dir() { "a folder, not a model file" } else { "no such model file" };
        eprintln!("error: {}: {why}", model.display());
        return Ok(exit::CONFIG);
    }
    let rt = match infer_stream::backend::ort::runtime(ort_library.map(|p| (p, "--ort-library"))) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            // A library named on the command line that does not load is a bad argument.
            return Ok(if ort_library.is_some() { exit::CONFIG } else { exit::RUNTIME });
        }
    };
    let r = match infer_stream::backend::ort::model_report(rt, model) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::CONFIG);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(exit::OK);
    }
    println!("model: {}", r.path.display());
    for (k, v) in [("producer", &r.producer), ("graph", &r.graph_name), ("description", &r.description), ("domain", &r.domain)] {
        if let Some(v) = v {
            println!("{k}: {v}");
        }
    }
    if let Some(v) = r.version {
        println!("version: {v}");
    }
    for (title, ios) in [("inputs", &r.inputs), ("outputs", &r.outputs)] {
        println!("{title}:");
        for io in ios.iter() {
            println!("  {:<32} {:<8} {}", io.name, io.dtype, io.shape_string());
        }
    }
    if !r.metadata.is_empty() {
        println!("metadata:");
        for (k, v) in &r.metadata {
            let n = v.chars().count();
            if n > 80 {
                println!("  {k}: {}… ({n} characters; --json shows all)", v.chars().take(60).collect::<String>().replace('\n', "\\n"));
            } else {
                println!("  {k}: {v}");
            }
        }
    }
    Ok(exit::OK)
}

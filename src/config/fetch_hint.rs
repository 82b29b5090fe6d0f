//! The help of a "file not found" error for a model or a media file: which
//! set-up script brings it when it is one of the bundled ones
//! (scripts/fetch-models.sh for PP-OCR and Silero, scripts/fetch-vision.sh
//! for the real vision models and footage, scripts/make-samples.sh for the
//! generated samples).

use std::path::Path;

/// The files scripts/fetch-vision.sh fetches (models/README.md, samples/README.md).
const VISION: &[&str] = &[
    "yolov12n.onnx",
    "centerface.onnx",
    "vtest.avi",
    "Megamind.avi",
    "messi5.jpg",
    "basketball1.png",
    "basketball2.png",
    "astronaut.png",
    "camera.png",
    "coffee.png",
    "chelsea.png",
];

const FIX: &str = "fix the path (relative paths start at the pipeline file's folder)";

fn from_vision(path: &Path) -> bool {
    path.file_name().is_some_and(|n| VISION.iter().any(|v| n == *v))
}

/// Help for a model file that is not there.
pub fn missing_model(path: &Path) -> String {
    if from_vision(path) {
        format!("run scripts/fetch-vision.sh (part of scripts/setup.sh), bring your own model, or {FIX}")
    } else {
        format!("run scripts/fetch-models.sh, or {FIX}")
    }
}

/// Help for a media file that is not there.
pub fn missing_media(path: &Path) -> String {
    if from_vision(path) {
        format!("run scripts/fetch-vision.sh (part of scripts/setup.sh), or {FIX}")
    } else {
        format!("{FIX}; scripts/make-samples.sh makes the bundled samples")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_script_that_fetches_the_file() {
        assert!(missing_model(Path::new("../models/yolov12n/yolov12n.onnx")).starts_with("run scripts/fetch-vision.sh"));
        assert!(missing_model(Path::new("/m/ch_PP-OCRv4_det_infer.onnx")).starts_with("run scripts/fetch-models.sh"));
        assert!(missing_media(Path::new("samples/vtest.avi")).starts_with("run scripts/fetch-vision.sh"));
        assert!(missing_media(Path::new("samples/plates.mp4")).contains("scripts/make-samples.sh"));
    }
}

//! A frame as Python sees it: the `Frame` object of `helper.py` with the
//! frame's NDJSON fields and `results` so far, the latest model outputs as
//! numpy arrays over the frame's own memory (no copy), and the picture as an
//! RGB array when the stage asks for it.

use std::sync::Arc;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::interp;
use crate::frame::{Frame, Payload};

/// The frame's JSON fields (`stream`, `seq`, `pts`, `width`, `height`,
/// `results` as the ndjson sink would write them now) and the letterbox of
/// its latest model input, as JSON text.
pub fn meta_json(frame: &Frame) -> String {
    let mut v = crate::frame::json::frame_json(frame);
    if let Some(lb) = frame.model_outputs().and_then(|o| o.letterbox.as_ref()) {
        v["letterbox"] = serde_json::json!({
            "src_w": lb.src_w, "src_h": lb.src_h, "dst_w": lb.dst_w, "dst_h": lb.dst_h,
            "new_w": lb.new_w, "new_h": lb.new_h, "pad_x": lb.pad_x, "pad_y": lb.pad_y,
            "inv_scale_x": lb.inv_scale_x, "inv_scale_y": lb.inv_scale_y,
        });
    }
    v.to_string()
}

/// The latest model outputs attached to the frame (shared, not copied).
pub fn latest_outputs(frame: &Frame) -> Option<Arc<Payload>> {
    frame.results.iter().rev().find(|a| matches!(*a.payload, Payload::Outputs(_))).map(|a| a.payload.clone())
}

fn tensor_data(p: &Payload, i: usize) -> &[f32] {
    match p {
        Payload::Outputs(o) => &o.outputs[i].1.data,
        _ => &[],
    }
}

/// An RGB picture: width, height, and `height * width * 3` bytes.
pub type Picture = (u32, u32, Vec<u8>);

/// The `Frame` object for `process(frame)`.
pub fn to_python<'py>(
    py: Python<'py>,
    meta: &str,
    outputs: Option<&Arc<Payload>>,
    picture: Option<Picture>,
) -> PyResult<Bound<'py, PyAny>> {
    let tensors = PyDict::new(py);
    if let Some(p) = outputs
        && let Payload::Outputs(o) = &**p
    {
        for (i, (name, t)) in o.outputs.iter().enumerate() {
            tensors.set_item(name, crate::backend::python::f32_view(py, p, i, tensor_data, &t.shape)?)?;
        }
    }
    let image = match picture {
        Some((w, h, rgb)) => PyArray1::from_vec(py, rgb).reshape([h as usize, w as usize, 3])?.into_any(),
        None => py.None().into_bound(py),
    };
    interp::helper(py)?.call_method1("frame", (meta, tensors, image))
}

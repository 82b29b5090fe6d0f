//! numpy arrays over the pipeline's own memory for `python` stages: a
//! model's output tensor seen from Python without a copy, read-only, kept
//! alive by the array for as long as Python holds it.

use std::sync::Arc;

use numpy::PyArrayDyn;
use numpy::ndarray::{ArrayViewD, IxDyn};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a borrowing array reads, kept alive as the array's base object.
#[pyclass(frozen, name = "PipelineMemory")]
struct Keep(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

/// A read-only `float32` array of `shape` over `data(&owner, index)`, with no
/// copy: the array's base object holds `owner`, so the memory stays valid
/// (and unchanged: `owner` is shared, never written) while Python holds the array.
pub fn f32_view<'py, T: Send + Sync + 'static>(
    py: Python<'py>,
    owner: &Arc<T>,
    index: usize,
    data: fn(&T, usize) -> &[f32],
    shape: &[usize],
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let slice = data(owner, index);
    let view = ArrayViewD::from_shape(IxDyn(shape), slice).map_err(|e| PyValueError::new_err(format!("tensor of shape {shape:?}: {e}")))?;
    let keep = Bound::new(py, Keep(Box::new(owner.clone())))?.into_any();
    // SAFETY: `slice` lies in memory owned by `*owner` (behind the `Arc`, so
    // it does not move), and `keep`, the array's base object, holds a clone of
    // that `Arc`: the memory outlives the array. `T` is only ever read through
    // shared references (the frame's results are immutable once attached), so
    // the memory is not reallocated or written while the array exists; the
    // array is made read-only below so that Python does not write it either.
    let array = unsafe { PyArrayDyn::borrow_from_array(&view, keep) };
    let flags = PyDict::new(py);
    flags.set_item("write", false)?;
    array.call_method("setflags", (), Some(&flags))?;
    Ok(array)
}

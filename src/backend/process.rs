//! Leaving the process at once, from any thread.

/// Exit with `code` now, without running exit handlers or the destructors of
/// static objects. `std::process::exit` runs them while the pipeline's
/// threads are still working, and ONNX Runtime tearing its environment down
/// under a running session makes those sessions fail (logged as frame
/// failures) or crash. Nothing is flushed: a sink may be blocked holding
/// standard output, and waiting for it would hang the exit. Output not yet
/// written is lost, as with SIGKILL; standard error is unbuffered.
pub fn exit_now(code: u8) -> ! {
    // SAFETY: `_exit` only ends the process: it takes a plain integer, touches
    // no memory of ours, and never returns, so no Rust value is observed in a
    // torn state. Skipping exit handlers is the point (see above); the kernel
    // closes our descriptors and frees everything.
    unsafe { libc::_exit(i32::from(code)) }
}

//! Leaving the process at once, from any thread; and a thread's scheduling
//! priority.

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

/// Lower the calling thread's CPU priority by `nice` steps (Linux: a nice
/// value applies per thread). For work that must never slow the pipeline,
/// such as encoding pictures for viewers: when the CPU is saturated the
/// pipeline's threads are served first, and this thread gets what is left.
/// Returns the error when the system refuses (the thread then runs as before).
pub fn lower_thread_priority(nice: i32) -> std::io::Result<()> {
    // SAFETY: `gettid` takes nothing and only returns the caller's thread id.
    let tid = unsafe { libc::gettid() };
    // SAFETY: `getpriority` reads its two integers and returns the thread's
    // nice value (-20..=19, so -1 is a value, not only an error: it cannot fail
    // for our own thread id).
    let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    // SAFETY: `setpriority` reads its three integers and changes only the
    // scheduling priority of thread `tid` (the caller); no memory is shared.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, (now + nice).min(19)) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lowers_only_the_calling_thread() {
        // SAFETY: as above; reading a priority changes nothing.
        let get = |tid: libc::pid_t| unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
        let main = unsafe { libc::gettid() };
        let before = get(main);
        let (tid, prio) = std::thread::spawn(|| {
            super::lower_thread_priority(5).unwrap();
            let tid = unsafe { libc::gettid() };
            (tid, unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) })
        })
        .join()
        .unwrap();
        assert_ne!(tid, main);
        assert_eq!(prio, (before + 5).min(19));
        assert_eq!(get(main), before, "the other threads keep their priority");
    }
}

//! Handing freed memory back to the operating system, for `serve`, where
//! streams come and go. glibc's allocator keeps what a thread freed in that
//! thread's arena for the next allocation, and by default raises its mmap and
//! trim thresholds as large blocks are freed, so that after a burst of
//! streams added and removed (each with its own decoder threads, frames and
//! counters) its arenas hold hundreds of MB that nothing uses: 200 streams of
//! a small clip added and removed left 890 MB resident with 5.6 MB in use.

/// Blocks of this size or more are mapped on their own (and unmapped when
/// freed); a free stretch this long at the top of an arena is given back.
/// These are glibc's initial values, kept fixed instead of growing.
const THRESHOLD: i32 = 128 * 1024;

/// From now on return freed memory to the system promptly: fixed mmap and
/// trim thresholds (glibc's `mallopt`), instead of thresholds that grow with
/// the largest block freed. Elsewhere (musl, other systems) nothing is done.
pub fn return_freed_memory_promptly() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` takes two plain integers and only sets the
        // allocator's parameters (under its own lock); setting either of these
        // two also turns glibc's dynamic adjustment of both off. No memory of
        // ours is touched.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
        }
    }
}

/// Return the free memory of every allocator arena to the system (glibc's
/// `malloc_trim`); `true` when some was returned. Elsewhere nothing is done.
pub fn return_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a plain integer (the padding to keep at
        // the top of the main heap), locks each arena itself while it returns
        // the arena's free pages with madvise/sbrk, and touches no memory that
        // is in use: live allocations are neither moved nor freed.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

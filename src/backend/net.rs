//! Socket options the standard library does not set.

use std::os::fd::{AsFd, AsRawFd};

/// Fix the kernel's send buffer of `socket` at `bytes` (Linux doubles the
/// figure for its bookkeeping; sockets accepted from a listener inherit it).
/// A buffer set so is no longer grown by the kernel's autotuning (up to
/// `net.ipv4.tcp_wmem`'s maximum, 4 MiB by default).
pub fn set_send_buffer(socket: &impl AsFd, bytes: usize) -> std::io::Result<()> {
    let fd = socket.as_fd();
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is borrowed from `socket`, so it stays open for the call;
    // the option value points to a live `c_int` and the length passed is its
    // size, which is what SO_SNDBUF reads.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&value as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    #[test]
    fn an_accepted_socket_has_the_listeners_send_buffer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        super::set_send_buffer(&l, 96 * 1024).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `s` is open; `v` and `len` are live and sized for SO_SNDBUF's `c_int`.
        let r =
            unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, (&mut v as *mut libc::c_int).cast(), &mut len) };
        assert_eq!(r, 0);
        assert_eq!(v, 2 * 96 * 1024, "Linux reports twice the figure set");
    }
}

//! Buffer pools: steady-state frames reuse buffers instead of allocating.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A pool of `Vec<T>` buffers. Buffers return to the pool when the
/// [`PoolBuf`] holding them drops, from whichever thread that is.
pub struct Pool<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Pool<T> {
    fn clone(&self) -> Self {
        Pool { inner: self.inner.clone() }
    }
}

struct Inner<T> {
    free: Mutex<Vec<Vec<T>>>,
    /// Buffers kept at most; more are freed on return.
    max_free: usize,
    allocations: AtomicU64,
    reuses: AtomicU64,
}

impl<T: Copy + Default> Pool<T> {
    /// `max_free` should cover the buffers in flight: queue capacities plus one per stage.
    pub fn new(max_free: usize) -> Self {
        Pool {
            inner: Arc::new(Inner {
                free: Mutex::new(Vec::new()),
                max_free: max_free.max(1),
                allocations: AtomicU64::new(0),
                reuses: AtomicU64::new(0),
            }),
        }
    }

    /// A buffer of exactly `len` elements. Contents are unspecified (old data or zeros).
    pub fn get(&self, len: usize) -> PoolBuf<T> {
        let reused = {
            let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
            // Prefer a buffer that already has the capacity.
            match free.iter().position(|b| b.capacity() >= len) {
                Some(i) => Some(free.swap_remove(i)),
                None => free.pop(),
            }
        };
        let buf = match reused {
            Some(mut b) if b.capacity() >= len => {
                self.inner.reuses.fetch_add(1, Ordering::Relaxed);
                // SAFETY-free resize: `T: Copy + Default`, so growing only writes defaults.
                b.resize(len, T::default());
                b
            }
            _ => {
                self.inner.allocations.fetch_add(1, Ordering::Relaxed);
                vec![T::default(); len]
            }
        };
        PoolBuf { buf, pool: Some(self.inner.clone()) }
    }

    /// Buffers allocated so far (not reused).
    pub fn allocations(&self) -> u64 {
        self.inner.allocations.load(Ordering::Relaxed)
    }

    pub fn reuses(&self) -> u64 {
        self.inner.reuses.load(Ordering::Relaxed)
    }
}

/// A buffer on loan from a [`Pool`].
pub struct PoolBuf<T> {
    buf: Vec<T>,
    pool: Option<Arc<Inner<T>>>,
}

impl<T> PoolBuf<T> {
    /// A buffer that belongs to no pool (tests, one-off tensors).
    pub fn detached(buf: Vec<T>) -> Self {
        PoolBuf { buf, pool: None }
    }
}

impl<T> Deref for PoolBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf
    }
}

impl<T> DerefMut for PoolBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf
    }
}

impl<T> Drop for PoolBuf<T> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let mut free = pool.free.lock().unwrap_or_else(|e| e.into_inner());
            if free.len() < pool.max_free {
                free.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for PoolBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PoolBuf(len {})", self.buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_state_reuses_buffers() {
        let pool = Pool::<u8>::new(4);
        for _ in 0..100 {
            let a = pool.get(1000);
            let b = pool.get(1000);
            drop((a, b));
        }
        assert_eq!(pool.allocations(), 2);
        assert_eq!(pool.reuses(), 198);
    }

    #[test]
    fn returns_across_threads_and_caps_free_list() {
        let pool = Pool::<f32>::new(2);
        let bufs: Vec<_> = (0..5).map(|_| pool.get(16)).collect();
        std::thread::spawn(move || drop(bufs)).join().unwrap();
        assert_eq!(pool.allocations(), 5);
        let _a = pool.get(16);
        let _b = pool.get(16);
        let _c = pool.get(16);
        assert_eq!(pool.allocations(), 6, "only two buffers were kept");
    }

    #[test]
    fn grows_a_small_buffer() {
        let pool = Pool::<u8>::new(1);
        drop(pool.get(10));
        let b = pool.get(20);
        assert_eq!(b.len(), 20);
    }
}

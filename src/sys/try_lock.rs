//! A lock that is only ever tried, never waited for.
//!
//! A window's receive state is taken once per progress pass, and a thread
//! that finds it taken goes on without it (another thread is delivering).
//! Nobody waits, so nobody needs waking: unlocking is a plain Release
//! store, where `std::sync::Mutex` pays a locked swap to look for waiters.
//! On the empty poll, which a spinning receiver runs back to back, that is
//! one of its two locked instructions.
//!
//! Ordering: a successful try (Acquire CAS) sees every write made under the
//! previous hold, which ended with the Release store.
//!
//! A guard is shared across threads only where `T` may be (`T: Sync`), as
//! `std::sync::MutexGuard`: a guard over a `Cell` stays on one thread.
//!
//! ```
//! use doorbell::try_lock::TryLock;
//! let l = TryLock::<u32>::default();
//! let g = l.try_lock().unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| assert_eq!(*g, 0));
//! });
//! ```
//!
//! ```compile_fail,E0277
//! use doorbell::try_lock::TryLock;
//! let l = TryLock::<std::cell::Cell<u32>>::default();
//! let g = l.try_lock().unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| g.set(1));
//! });
//! ```

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Default)]
pub struct TryLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and `held` admits one
// guard at a time (the CAS below), so sharing the lock across threads
// hands `T` from one thread to another: `T: Send` is what that needs.
unsafe impl<T: Send> Sync for TryLock<T> {}

/// Hands out `&T` and `&mut T`: `PhantomData<&mut T>` gives the guard
/// exactly their auto traits (Sync only if `T: Sync`, Send if `T: Send`).
pub struct TryLockGuard<'a, T> {
    lock: &'a TryLock<T>,
    _value: PhantomData<&'a mut T>,
}

impl<T> TryLock<T> {
    /// The value, or None if another thread holds it now.
    pub fn try_lock(&self) -> Option<TryLockGuard<'_, T>> {
        // Look first: a held lock costs a load, not a locked instruction.
        if self.held.load(Ordering::Relaxed) {
            return None;
        }
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TryLockGuard { lock: self, _value: PhantomData })
    }
}

impl<T> Deref for TryLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `try_lock`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for TryLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` is unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for TryLockGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let l = TryLock::<u32>::default();
        let mut g = l.try_lock().expect("free");
        *g += 1;
        assert!(l.try_lock().is_none());
        drop(g);
        assert_eq!(*l.try_lock().expect("free again"), 1);
    }

    #[test]
    fn increments_under_contention_are_not_lost() {
        let l = TryLock::<u64>::default();
        let done = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut mine = 0;
                    while mine < 10_000 {
                        if let Some(mut g) = l.try_lock() {
                            *g += 1;
                            mine += 1;
                        }
                    }
                    done.fetch_add(mine, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(*l.try_lock().unwrap(), done.load(Ordering::Relaxed));
    }
}

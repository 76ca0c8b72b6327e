//! A value one session at a time checks out: the data of the memory store, the connection of
//! the SQLite store. What a pool of one is, without a pool's machinery.
//!
//! Checking out blocks the calling thread while another session has the value, as a
//! `std::sync::Mutex` would; unlike a mutex guard, the checked-out value is owned, so a
//! session holding it is `Send` and can live inside the engine's futures. Those backends'
//! primitives never wait on anything, so a session gives the value back within the store call
//! that took it (and on a panic too: the checkout's `Drop` returns it).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// The value, and a signal for those waiting for it.
#[derive(Debug)]
pub struct Slot<T> {
    value: Mutex<Option<T>>,
    returned: Condvar,
}

impl<T> Slot<T> {
    /// A slot holding `value`.
    pub fn new(value: T) -> Slot<T> {
        Slot {
            value: Mutex::new(Some(value)),
            returned: Condvar::new(),
        }
    }

    /// Takes the value out, waiting (blocking the thread) while another checkout has it.
    pub fn check_out(self: &Arc<Slot<T>>) -> Checkout<T> {
        let mut value = self.value.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(v) = value.take() {
                return Checkout {
                    slot: self.clone(),
                    value: Some(v),
                };
            }
            value = self
                .returned
                .wait(value)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Takes the value out for good (`None` while it is checked out): closing an embedded
    /// backend.
    pub fn take(&self) -> Option<T> {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl<T: Default> Default for Slot<T> {
    fn default() -> Self {
        Slot::new(T::default())
    }
}

/// The checked-out value; given back when dropped.
#[derive(Debug)]
pub struct Checkout<T> {
    slot: Arc<Slot<T>>,
    value: Option<T>,
}

impl<T> Deref for Checkout<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value
            .as_ref()
            .expect("a checkout holds its value until dropped")
    }
}

impl<T> DerefMut for Checkout<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
            .as_mut()
            .expect("a checkout holds its value until dropped")
    }
}

impl<T> Drop for Checkout<T> {
    fn drop(&mut self) {
        if let Some(v) = self.value.take() {
            *self
                .slot
                .value
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(v);
            self.slot.returned.notify_one();
        }
    }
}

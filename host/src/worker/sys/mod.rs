//! The platform part of the workers: the protocol's private pipes and the memory cap inside
//! a worker, how a worker ends, and how the host reads a worker's exit.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

//! The platform part: how a program's whole tree is held together and stopped.
//!
//! Public because takt-host's worker pool holds its worker processes the same way (a
//! process group on Unix, a kill-on-close Job Object on Windows): one implementation of the
//! tree, its kill and its exit words for both kinds of child process.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

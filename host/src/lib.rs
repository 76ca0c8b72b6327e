//! takt's host runtime: everything that touches the outside world.
//!
//! Today this is the schedule specification format shared by config files, the API and the
//! command line ([`spec`]) and the `takt` command line itself ([`cli`]). The plugin loader,
//! executor, scheduling loop and stores arrive here as their issues land; the pure decisions
//! they carry out live in `takt-core`.

pub mod cli;
pub mod executor;
pub mod plugins;
pub mod spec;
pub mod store;

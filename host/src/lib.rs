//! takt's host runtime: everything that touches the outside world.
//!
//! [`embed::HostBuilder`] assembles all of it for a program that embeds the host. The handlers the host runs itself on its own store, such as retention ([`builtin`]);
//! the schedule specification shared by config files, the API and the command line ([`spec`]);
//! the plugin loader and hot swaps ([`plugins`]); worker processes that serve isolated
//! plugins ([`worker`]); the executor that runs handler calls with deadlines
//! ([`executor`]); the scheduling loop that claims due runs from a store, runs them and records
//! how they ended ([`scheduler`]); the SQLite store ([`store`]); and the `takt` command line
//! ([`cli`]). The decisions they carry out — schedules, the run state machine, retry, misfire
//! and overlap policies, the storage contract — live in `takt-core`.

pub mod alerts;
pub mod builtin;
pub mod cli;
pub mod config;
pub mod dynparams;
pub mod embed;
pub mod executor;
pub mod http;
pub mod inspect;
pub mod metrics;
pub mod plugins;
pub mod scheduler;
pub mod spec;
pub mod store;
pub mod worker;

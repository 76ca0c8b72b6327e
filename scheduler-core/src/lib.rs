//! takt's pure core.
//!
//! This crate holds what the scheduler *decides*, never what it *does*: schedule models and the
//! next-fire engine today, the run state machine and policies as they arrive. It performs no
//! I/O, reads no clock (every function that needs "now" takes it as an argument), starts no
//! threads and knows nothing of tokio or SQL. That is what lets the host test an hour of
//! scheduling in milliseconds and lets every backend share one set of rules.
//!
//! Entry points: [`schedule::Schedule`] (a rule plus an IANA zone plus a DST policy) and its
//! [`schedule::Schedule::next_after`]; [`job::JobDef`], the job model; [`run::Run`] and
//! [`run::transition`], the run state machine; [`policy::misfire::plan`] (what becomes of due
//! and missed fires), [`policy::overlap::decide`] and [`policy::RetryPolicy`]; [`store::Store`], the
//! storage contract (futures only: the drivers live in the host), with its in-memory reference
//! [`store::memory::MemoryStore`] and the [`store::conformance`] suite every backend runs.

#![forbid(unsafe_code)]

pub mod alert;
pub mod attempt;
pub mod civil;
pub mod group;
pub mod job;
pub mod node;
pub mod pause;
pub mod policy;
pub mod run;
pub mod schedule;
pub mod store;

pub use jiff::Timestamp;

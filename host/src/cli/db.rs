//! `takt db migrate`, and what every data command shares: where the database is and how it is
//! opened.

use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::store::{
    MigrationEvent, MigrationObserver, SqliteOptions, SqliteStore, latest_version, migrate,
};

/// The database file used when neither `--db` nor `TAKT_DB` is given.
pub(super) const DEFAULT_DB: &str = "takt.db";

#[derive(Debug, Args)]
pub(super) struct DbArg {
    /// The SQLite database file [default: $TAKT_DB, else takt.db in the working directory].
    /// (`takt run` reads its database from the config file's `database` key instead.)
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

impl DbArg {
    /// `--db`, else `TAKT_DB`, else `takt.db`.
    pub(super) fn path(&self) -> PathBuf {
        match (&self.db, std::env::var_os("TAKT_DB")) {
            (Some(p), _) => p.clone(),
            (None, Some(env)) if !env.is_empty() => PathBuf::from(env),
            _ => PathBuf::from(DEFAULT_DB),
        }
    }

    /// Opens the store (creating the file and applying missing migrations, as `takt run`
    /// does); the store's own error says what is wrong with the file.
    pub(super) fn open(&self) -> Result<SqliteStore> {
        Ok(SqliteStore::open(self.path(), &progress_options())?)
    }
}

#[derive(Debug, Subcommand)]
pub(super) enum DbCmd {
    /// Apply the schema migrations the database lacks (creating the file if needed).
    Migrate {
        #[command(flatten)]
        db: DbArg,
    },
}

/// Drives one store future to completion on a single-threaded runtime.
pub(super) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("cannot start the async runtime")?;
    Ok(rt.block_on(future))
}

pub(super) fn run(cmd: DbCmd) -> Result<()> {
    match cmd {
        DbCmd::Migrate { db } => {
            let path = db.path();
            let applied = migrate(&path, &progress_options())?;
            if applied.is_empty() {
                println!(
                    "{}: up to date (version {})",
                    path.display(),
                    latest_version()
                );
            }
            for m in applied {
                println!(
                    "{}: applied migration {:04} {}",
                    path.display(),
                    m.version,
                    m.name
                );
            }
            Ok(())
        }
    }
}

/// Store options that show migration progress on stderr: a line when a migration starts,
/// the elapsed time while it runs (rewritten in place on a terminal, a line every few seconds
/// otherwise, so logs of a service stay readable), and the time it took.
pub(super) fn progress_options() -> SqliteOptions {
    let tty = std::io::stderr().is_terminal();
    let next_line = AtomicU64::new(5);
    let observer = MigrationObserver::new(move |event| match event {
        MigrationEvent::Started(m) => {
            next_line.store(5, Ordering::Relaxed);
            eprintln!("applying migration {:04}_{} …", m.version, m.name);
        }
        MigrationEvent::Working(m, elapsed) => {
            if tty {
                eprint!(
                    "\r  migration {:04}_{} running for {:.1} s",
                    m.version,
                    m.name,
                    elapsed.as_secs_f64()
                );
            } else if elapsed.as_secs() >= next_line.load(Ordering::Relaxed) {
                next_line.store(elapsed.as_secs() + 5, Ordering::Relaxed);
                eprintln!(
                    "  migration {:04}_{} still running after {} s",
                    m.version,
                    m.name,
                    elapsed.as_secs()
                );
            }
        }
        MigrationEvent::Finished(m, elapsed) => {
            if tty {
                eprint!("\r\x1b[K");
            }
            eprintln!(
                "applied migration {:04}_{} in {:.1} s",
                m.version,
                m.name,
                elapsed.as_secs_f64()
            );
        }
    });
    SqliteOptions::default().with_migration_observer(observer)
}

//! `takt db migrate`, and what every data command shares: where the database is and how it is
//! opened.

use std::future::Future;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::store::{SqliteOptions, SqliteStore, latest_version, migrate};

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
        Ok(SqliteStore::open(self.path(), &SqliteOptions::default())?)
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
            let applied = migrate(&path)?;
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

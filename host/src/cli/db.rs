//! `takt db migrate`, and what every data command shares: where the database is and how it is
//! opened.

use std::future::Future;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::store::{AnyStore, Database, MigrationEvent, MigrationObserver};

/// The database file used when neither `--db` nor `TAKT_DB` is given.
pub(super) const DEFAULT_DB: &str = "takt.db";

#[derive(Debug, Args)]
pub(super) struct DbArg {
    /// The database: a SQLite file, a postgres:// URL, or a SQL Server ADO.NET string
    /// ("Server=host,1433;Database=…;User Id=…;Password=…") [default: $TAKT_DB, else takt.db in
    /// the working directory]. With PostgreSQL, $TAKT_PG_SCHEMA names the schema.
    /// (`takt run` reads its database from the config file's `database` key instead.)
    #[arg(long, value_name = "PATH|URL")]
    db: Option<String>,
}

impl DbArg {
    /// `--db`, else `TAKT_DB`, else `takt.db`; an unknown URL scheme is refused.
    pub(super) fn database(&self) -> Result<Database> {
        let (text, source) = match (&self.db, std::env::var("TAKT_DB")) {
            (Some(p), _) => (p.clone(), "--db"),
            (None, Ok(env)) if !env.is_empty() => (env, "TAKT_DB"),
            _ => (DEFAULT_DB.to_string(), "the default"),
        };
        let mut db =
            Database::parse(&text, Path::new("")).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        if let Database::Postgres { schema, .. } = &mut db {
            *schema = std::env::var("TAKT_PG_SCHEMA")
                .ok()
                .filter(|s| !s.is_empty());
        }
        Ok(db)
    }

    /// Opens the existing database, creating and migrating nothing (only `init`, `db
    /// migrate` and `run` do that); the store's own error says what is wrong and what to run.
    pub(super) fn open(&self) -> Result<AnyStore> {
        Ok(block_on(self.database()?.open_existing())??)
    }
}

#[derive(Debug, Subcommand)]
pub(super) enum DbCmd {
    /// Apply the schema migrations the database lacks (creating the file if needed).
    Migrate {
        #[command(flatten)]
        db: DbArg,
        /// Print one JSON document: the database, the migrations applied now (none when it was
        /// up to date) and the schema version.
        #[arg(long)]
        json: bool,
    },
}

/// The command's runtime: one for the whole process, because a PostgreSQL store's
/// connections are tasks of the runtime that opened them.
static RUNTIME: LazyLock<std::io::Result<tokio::runtime::Runtime>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
});

/// Drives one store future to completion on the command's runtime.
pub(super) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let rt = RUNTIME
        .as_ref()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    Ok(rt.block_on(future))
}

pub(super) fn run(cmd: DbCmd) -> Result<()> {
    match cmd {
        DbCmd::Migrate { db, json } => {
            let database = db.database()?;
            let applied = block_on(migrate(&database))??;
            if json {
                let list: Vec<serde_json::Value> = applied
                    .0
                    .iter()
                    .map(|m| serde_json::json!({"version": m.version, "name": m.name}))
                    .collect();
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "database": database.to_string(),
                        "applied": list,
                        "version": applied.1,
                    }))?
                )?;
                return Ok(());
            }
            if applied.0.is_empty() {
                outln!("{database}: up to date (version {})", applied.1)?;
            }
            for m in applied.0 {
                outln!("{database}: applied migration {:04} {}", m.version, m.name)?;
            }
            Ok(())
        }
    }
}

/// Opens `database` applying what it lacks: the migrations applied, and the version now.
async fn migrate(
    database: &Database,
) -> Result<(Vec<crate::store::AppliedMigration>, u32), takt_core::store::StoreError> {
    let applied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = applied.clone();
    let progress = progress_observer();
    let observer = MigrationObserver::new(move |event| {
        if let MigrationEvent::Finished(m, _) = event {
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(crate::store::AppliedMigration {
                    version: m.version,
                    name: m.name,
                });
        }
        progress.emit(event);
    });
    let store = database.open(Some(observer)).await?;
    let version = store.schema_version().await?;
    let applied = applied
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Ok((applied, version))
}

/// A migration observer for `takt run`: its progress as log events (`info`), so that a
/// service log — text or JSON — has it in its own format.
pub(super) fn progress_log() -> MigrationObserver {
    let next_line = AtomicU64::new(5);
    MigrationObserver::new(move |event| match event {
        MigrationEvent::Started(m) => {
            next_line.store(5, Ordering::Relaxed);
            tracing::info!("applying migration {:04}_{}", m.version, m.name);
        }
        MigrationEvent::Working(m, elapsed) => {
            if elapsed.as_secs() >= next_line.load(Ordering::Relaxed) {
                next_line.store(elapsed.as_secs() + 5, Ordering::Relaxed);
                tracing::info!(
                    "migration {:04}_{} still running after {} s",
                    m.version,
                    m.name,
                    elapsed.as_secs()
                );
            }
        }
        MigrationEvent::Finished(m, elapsed) => tracing::info!(
            "applied migration {:04}_{} in {:.1} s",
            m.version,
            m.name,
            elapsed.as_secs_f64()
        ),
    })
}

/// A migration observer that shows progress on stderr: a line when a migration starts,
/// the elapsed time while it runs (rewritten in place on a terminal, a line every few seconds
/// otherwise, so logs of a service stay readable), and the time it took.
pub(super) fn progress_observer() -> MigrationObserver {
    let tty = std::io::stderr().is_terminal();
    let next_line = AtomicU64::new(5);
    MigrationObserver::new(move |event| match event {
        MigrationEvent::Started(m) => {
            next_line.store(5, Ordering::Relaxed);
            errln!("applying migration {:04}_{} …", m.version, m.name);
        }
        MigrationEvent::Working(m, elapsed) => {
            if tty {
                super::out::write_err(format_args!(
                    "\r  migration {:04}_{} running for {:.1} s",
                    m.version,
                    m.name,
                    elapsed.as_secs_f64()
                ));
            } else if elapsed.as_secs() >= next_line.load(Ordering::Relaxed) {
                next_line.store(elapsed.as_secs() + 5, Ordering::Relaxed);
                errln!(
                    "  migration {:04}_{} still running after {} s",
                    m.version,
                    m.name,
                    elapsed.as_secs()
                );
            }
        }
        MigrationEvent::Finished(m, elapsed) => {
            if tty {
                super::out::write_err(format_args!("\r\x1b[K"));
            }
            errln!(
                "applied migration {:04}_{} in {:.1} s",
                m.version,
                m.name,
                elapsed.as_secs_f64()
            );
        }
    })
}

//! The migration checks every database backend runs, beside the core's conformance suite
//! ([`takt_core::store::conformance`]), which cannot hold them: migrations are files, SQL and
//! schemas, and the core does no I/O.
//!
//! A backend's test implements [`MigrationTarget`] for a fresh, empty place (a file, a schema,
//! a database) and calls [`run_migration_checks`] with a factory of such places:
//!
//! ```ignore
//! let report = run_migration_checks(|| async { SqliteTarget::new() }).await;
//! eprintln!("{report}");
//! report.expect_skipped(&[]);
//! ```
//!
//! What they hold every backend to: a read-only open of an empty place creates nothing; the
//! first open applies every migration in order and says so to its observer; nodes starting
//! together on an empty place migrate it once; a second migration is a no-op; a schema from a
//! newer takt is refused — by a migrating open, a read-only open and an explicit migrate alike —
//! in the same words on every backend, and left as it was.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use takt_core::store::StoreErrorKind;
use takt_core::store::conformance::{Report, join};

use super::migrate::{AppliedMigration, Migration, MigrationEvent, MigrationObserver};

/// A fresh, empty place for one backend's store, with the raw access the checks need to see
/// what its migrations wrote (not through the store, whose reads would trust the migrator).
pub trait MigrationTarget {
    /// The backend's store.
    type Store;

    /// A part of every message about this place (its path, its server and schema): the
    /// checks require the refusals to name where they looked.
    fn shown(&self) -> String;

    /// The backend's migrations, in order.
    fn migrations(&self) -> &'static [Migration];

    /// Opens a store on the place: `migrate` as the options' flag (`false`: a read-only
    /// command's open), `observer` told about the migrations the open applies.
    fn open(
        &self,
        migrate: bool,
        observer: Option<MigrationObserver>,
    ) -> impl Future<Output = takt_core::store::StoreResult<Self::Store>>;

    /// `takt db migrate` on an open store.
    fn migrate(
        &self,
        store: &Self::Store,
    ) -> impl Future<Output = takt_core::store::StoreResult<Vec<AppliedMigration>>>;

    /// The versions the place's `schema_migrations` table records, in order, read with the
    /// driver directly; `None` when the place has no such table (and, for a file, when the
    /// file does not exist: reading must create nothing either).
    fn recorded(&self) -> impl Future<Output = Option<Vec<u32>>>;

    /// Records `version` as applied, as a newer takt would have.
    fn record_newer(&self, version: u32) -> impl Future<Output = ()>;
}

/// Runs every migration check, each on a fresh place from `make`. A failing check panics with
/// its name and what went wrong; no check is skipped today, but the report keeps the suite's
/// rule that a skip must be declared.
pub async fn run_migration_checks<T, F, Fut>(make: F) -> Report
where
    T: MigrationTarget,
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let mut report = Report::default();
    macro_rules! check {
        ($name:ident) => {
            $name(make().await).await;
            report.passed.push(stringify!($name));
        };
    }
    check!(a_read_only_open_of_an_empty_place_creates_nothing);
    check!(the_first_open_applies_every_migration_in_order);
    check!(nodes_starting_together_migrate_once);
    check!(migrations_applied_twice_are_a_noop);
    check!(a_newer_schema_is_refused_and_left_untouched);
    report
}

fn all_versions(target: &impl MigrationTarget) -> Vec<u32> {
    target.migrations().iter().map(|m| m.version).collect()
}

fn latest(target: &impl MigrationTarget) -> u32 {
    target.migrations().last().map_or(0, |m| m.version)
}

/// `takt job list` on a place nobody migrated: refused as not found, naming the place and the
/// way out, and nothing created.
pub async fn a_read_only_open_of_an_empty_place_creates_nothing<T: MigrationTarget>(target: T) {
    let err = match target.open(false, None).await {
        Ok(_) => panic!("a_read_only_open_of_an_empty_place_creates_nothing: the open succeeded"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), StoreErrorKind::NotFound, "{err}");
    let msg = err.to_string();
    for part in [
        target.shown().as_str(),
        "no takt database",
        "takt init",
        "takt db migrate",
    ] {
        assert!(
            msg.contains(part),
            "a_read_only_open_of_an_empty_place_creates_nothing: {part:?} missing in: {msg}"
        );
    }
    assert_eq!(
        target.recorded().await,
        None,
        "a_read_only_open_of_an_empty_place_creates_nothing: the open created takt's tables"
    );
}

/// The first open applies every migration, in order, each reported started and then finished,
/// and records each once.
pub async fn the_first_open_applies_every_migration_in_order<T: MigrationTarget>(target: T) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let observer = MigrationObserver::new(move |e| {
        seen.lock().unwrap_or_else(PoisonError::into_inner).push(e);
    });
    let store = target
        .open(true, Some(observer))
        .await
        .unwrap_or_else(|e| panic!("the_first_open_applies_every_migration_in_order: {e}"));
    let events = events
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut expected = Vec::new();
    for m in target.migrations() {
        expected.push(format!("started {}", m.version));
        expected.push(format!("finished {}", m.version));
    }
    let got: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            MigrationEvent::Started(m) => Some(format!("started {}", m.version)),
            MigrationEvent::Finished(m, _) => Some(format!("finished {}", m.version)),
            MigrationEvent::Working(..) => None,
        })
        .collect();
    assert_eq!(
        got, expected,
        "the_first_open_applies_every_migration_in_order: the observer's events"
    );
    assert_eq!(
        target.recorded().await,
        Some(all_versions(&target)),
        "the_first_open_applies_every_migration_in_order: the recorded versions"
    );
    drop(store);
}

/// Three nodes opening an empty place at once: all succeed, and each migration is applied and
/// recorded once. The opens are polled together on one task: with an async driver that is
/// three connections racing to the migrator's lock; SQLite's open is synchronous, so there
/// they run in turn (its own test races real threads).
pub async fn nodes_starting_together_migrate_once<T: MigrationTarget>(target: T) {
    let ((a, b), c) = join(
        join(target.open(true, None), target.open(true, None)),
        target.open(true, None),
    )
    .await;
    for (node, r) in [("a", &a), ("b", &b), ("c", &c)] {
        if let Err(e) = r {
            panic!("nodes_starting_together_migrate_once: node {node} failed to open: {e}");
        }
    }
    assert_eq!(
        target.recorded().await,
        Some(all_versions(&target)),
        "nodes_starting_together_migrate_once: the recorded versions"
    );
}

/// Migrating a migrated place changes nothing, and says so (an empty list), however often.
pub async fn migrations_applied_twice_are_a_noop<T: MigrationTarget>(target: T) {
    let store = target
        .open(true, None)
        .await
        .unwrap_or_else(|e| panic!("migrations_applied_twice_are_a_noop: {e}"));
    for time in ["again", "a third time"] {
        let applied = target
            .migrate(&store)
            .await
            .unwrap_or_else(|e| panic!("migrations_applied_twice_are_a_noop: {time}: {e}"));
        assert_eq!(
            applied,
            [],
            "migrations_applied_twice_are_a_noop: migrating {time}"
        );
    }
    let events = Arc::new(Mutex::new(0usize));
    let seen = events.clone();
    let observer = MigrationObserver::new(move |_| {
        *seen.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    });
    let reopened = target
        .open(true, Some(observer))
        .await
        .unwrap_or_else(|e| panic!("migrations_applied_twice_are_a_noop: reopening: {e}"));
    assert_eq!(
        *events.lock().unwrap_or_else(PoisonError::into_inner),
        0,
        "migrations_applied_twice_are_a_noop: a reopen reported migrations"
    );
    let read_only = target.open(false, None).await.unwrap_or_else(|e| {
        panic!("migrations_applied_twice_are_a_noop: a read-only open of a current schema: {e}")
    });
    assert_eq!(
        target.recorded().await,
        Some(all_versions(&target)),
        "migrations_applied_twice_are_a_noop: each version recorded once"
    );
    drop((store, reopened, read_only));
}

/// A place a newer takt migrated: every way in refuses it in the same words, naming the place,
/// both versions and both ways out, and nothing is written.
pub async fn a_newer_schema_is_refused_and_left_untouched<T: MigrationTarget>(target: T) {
    const NEWER: u32 = 999;
    let store = target
        .open(true, None)
        .await
        .unwrap_or_else(|e| panic!("a_newer_schema_is_refused_and_left_untouched: {e}"));
    target.record_newer(NEWER).await;
    let mut before = all_versions(&target);
    before.push(NEWER);
    assert_eq!(
        target.recorded().await,
        Some(before.clone()),
        "a_newer_schema_is_refused_and_left_untouched: the pretended newer version"
    );

    let migrating = target.open(true, None).await.err();
    let read_only = target.open(false, None).await.err();
    let explicit = target.migrate(&store).await.err();
    let mut messages = Vec::new();
    for (way, err) in [
        ("a migrating open", migrating),
        ("a read-only open", read_only),
        ("an explicit migrate", explicit),
    ] {
        let Some(err) = err else {
            panic!("a_newer_schema_is_refused_and_left_untouched: {way} succeeded");
        };
        assert_eq!(err.kind(), StoreErrorKind::Other, "{way}: {err}");
        let msg = err.to_string();
        for part in [
            target.shown().as_str(),
            &format!("schema version {NEWER}"),
            &format!("versions 1 to {}", latest(&target)),
            "newer takt",
            "restore a backup",
            "left it untouched",
        ] {
            assert!(
                msg.contains(part),
                "a_newer_schema_is_refused_and_left_untouched: {way}: {part:?} missing in: {msg}"
            );
        }
        messages.push(msg);
    }
    assert!(
        messages.windows(2).all(|w| w[0] == w[1]),
        "a_newer_schema_is_refused_and_left_untouched: the refusals differ: {messages:#?}"
    );
    assert_eq!(
        target.recorded().await,
        Some(before),
        "a_newer_schema_is_refused_and_left_untouched: the refusals wrote to the schema"
    );
    drop(store);
}

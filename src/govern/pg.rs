//! PostgreSQL, the shared engine past one machine: a few connections per database a
//! process opens, each on a thread of its own, and the schema the program creates and
//! upgrades itself (versioned; a database newer than this program is refused rather
//! than misread).
//!
//! Each connection lives on its own thread with its own small runtime, so that callers
//! can be synchronous (the ledger calls its stores from blocking tasks, the `ledger`
//! command from anywhere) without ever blocking inside another runtime. Each call is one
//! closure run on whichever connection is free; a connection that broke is made again
//! on its next call.

use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};

use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::pg_tls::{self, Tls};

/// The schema version this program writes. Each step of [`MIGRATIONS`] brings a
/// database from the version before it to its own.
pub const SCHEMA_VERSION: i32 = 6;

/// Version `i + 1` is reached by running `MIGRATIONS[i]`.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE ledger_entries (
    id BIGSERIAL PRIMARY KEY,
    team TEXT NOT NULL,
    period TEXT NOT NULL,
    amount NUMERIC NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled')),
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    settled_at TIMESTAMPTZ
);
CREATE INDEX ledger_entries_open ON ledger_entries (team, period, state);
CREATE INDEX ledger_entries_by_run ON ledger_entries (run_id, state);
CREATE TABLE ledger_totals (
    team TEXT NOT NULL,
    period TEXT NOT NULL,
    settled NUMERIC NOT NULL DEFAULT 0,
    reserved NUMERIC NOT NULL DEFAULT 0,
    cap NUMERIC,
    PRIMARY KEY (team, period)
);
",
    "
CREATE TABLE queue_runs (
    run_id TEXT PRIMARY KEY,
    job_file TEXT NOT NULL,
    job_sha TEXT NOT NULL,
    header JSONB NOT NULL,
    run_json JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE queue_tasks (
    run_id TEXT NOT NULL REFERENCES queue_runs (run_id) ON DELETE CASCADE,
    seq INT NOT NULL,
    key TEXT NOT NULL,
    variant TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done')),
    attempts INT NOT NULL DEFAULT 0,
    worker TEXT,
    lease_until TIMESTAMPTZ,
    started_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    record BYTEA,
    transcript BYTEA,
    patch BYTEA,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX queue_tasks_claim ON queue_tasks (run_id, state, seq);
CREATE TABLE queue_superseded (
    run_id TEXT NOT NULL REFERENCES queue_runs (run_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    attempt INT NOT NULL,
    worker TEXT NOT NULL,
    record BYTEA NOT NULL,
    transcript BYTEA,
    finished_at TIMESTAMPTZ NOT NULL
);
",
    "
CREATE TABLE rate_buckets (
    key TEXT PRIMARY KEY,
    capacity DOUBLE PRECISION NOT NULL,
    per_second DOUBLE PRECISION NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    paused_until TIMESTAMPTZ
);
-- Takes amounts[i] from bucket keys[i] (made full at caps[i], refilling at rates[i] a
-- second), all or none, by the database's clock: 0 when taken, else the seconds to wait
-- (a pause, or the longest refill). An amount above a bucket's capacity goes once the
-- bucket is full and leaves it in debt. Rows are locked in the order the keys come
-- (a gate always gives its own keys in one order, and a call holds one gate's): no cycle.
CREATE FUNCTION agentbatch_take(keys TEXT[], amounts DOUBLE PRECISION[],
                                caps DOUBLE PRECISION[], rates DOUBLE PRECISION[])
RETURNS DOUBLE PRECISION LANGUAGE plpgsql AS $f$
DECLARE
    now_ TIMESTAMPTZ := clock_timestamp();
    wait DOUBLE PRECISION := 0;
    lvl DOUBLE PRECISION;
    b RECORD;
    i INT;
BEGIN
    FOR i IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
        INSERT INTO rate_buckets (key, capacity, per_second, tokens, at)
        VALUES (keys[i], caps[i], rates[i], caps[i], now_)
        ON CONFLICT (key) DO UPDATE SET capacity = EXCLUDED.capacity, per_second = EXCLUDED.per_second
        WHERE rate_buckets.capacity <> EXCLUDED.capacity OR rate_buckets.per_second <> EXCLUDED.per_second;
    END LOOP;
    FOR b IN SELECT * FROM rate_buckets WHERE key = ANY(keys) ORDER BY key FOR UPDATE LOOP
        i := array_position(keys, b.key);
        IF b.paused_until IS NOT NULL AND b.paused_until > now_ THEN
            wait := GREATEST(wait, EXTRACT(EPOCH FROM b.paused_until - now_));
        END IF;
        lvl := LEAST(b.capacity, b.tokens + EXTRACT(EPOCH FROM now_ - b.at) * b.per_second);
        IF lvl < LEAST(amounts[i], b.capacity) THEN
            wait := GREATEST(wait, (LEAST(amounts[i], b.capacity) - lvl) / b.per_second);
        END IF;
    END LOOP;
    IF wait > 0 THEN
        RETURN wait;
    END IF;
    UPDATE rate_buckets r
    SET tokens = LEAST(r.capacity, r.tokens + EXTRACT(EPOCH FROM now_ - r.at) * r.per_second) - a.amount,
        at = now_
    FROM unnest(keys, amounts) AS a(key, amount)
    WHERE r.key = a.key;
    RETURN 0;
END
$f$;
-- Gives back (positive) or charges (negative) deltas[i] to bucket keys[i].
CREATE FUNCTION agentbatch_adjust(keys TEXT[], deltas DOUBLE PRECISION[])
RETURNS VOID LANGUAGE plpgsql AS $f$
DECLARE
    now_ TIMESTAMPTZ := clock_timestamp();
BEGIN
    PERFORM 1 FROM rate_buckets WHERE key = ANY(keys) ORDER BY key FOR UPDATE;
    UPDATE rate_buckets r
    SET tokens = LEAST(r.capacity,
                       LEAST(r.capacity, r.tokens + EXTRACT(EPOCH FROM now_ - r.at) * r.per_second) + a.delta),
        at = now_
    FROM unnest(keys, deltas) AS a(key, delta)
    WHERE r.key = a.key;
END
$f$;
",
    // A reservation's holder: the worker that renews it while it is in flight.
    "
ALTER TABLE ledger_entries ADD COLUMN holder TEXT;
CREATE INDEX ledger_entries_by_holder ON ledger_entries (holder) WHERE state = 'reserved';
",
    // A team's cap set in the ledger (`agentbatch ledger set-cap`), over its job's.
    "
CREATE TABLE ledger_caps (
    team TEXT PRIMARY KEY,
    usd NUMERIC NOT NULL,
    set_at TIMESTAMPTZ NOT NULL
);
",
    // A worker's slice of a cap: the part it may not have spent (see CapStore::slices).
    "
ALTER TABLE ledger_entries ADD COLUMN idle NUMERIC NOT NULL DEFAULT 0;
ALTER TABLE ledger_entries ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
",
];

/// Why the database could not be used. `url` never holds a password.
#[derive(Debug, thiserror::Error)]
#[error("PostgreSQL at {url}: {detail}")]
pub struct PgError {
    pub url: String,
    pub detail: String,
}

pub use crate::vocab::values::is_postgres_url as is_url;

pub use crate::vocab::values::{
    postgres_url_has_password as has_password, redact_postgres_url as redact,
};

/// A client error as a user can act on it: the server's message, severity, code,
/// detail and hint (the error's own text is only "db error"), or the chain of causes
/// of a connection's failure.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} ({} {})", db.message(), db.severity(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str(&format!("; {d}"));
        }
        if let Some(h) = db.hint() {
            s.push_str(&format!("; hint: {h}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(&format!(": {c}"));
        cause = c.source();
    }
    s
}

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// Connections (each on a thread of its own) per database a process opens: calls from
/// many tasks at once need not wait for each other.
const CONNECTIONS: usize = 4;

/// Calls made to the database by this process, and the time callers spent waiting for
/// them (for the coordination benchmark).
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static WAITED_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `(calls, nanoseconds waited)` so far, over every connection of this process.
pub fn counters() -> (u64, u64) {
    use std::sync::atomic::Ordering;
    (
        CALLS.load(Ordering::Relaxed),
        WAITED_NS.load(Ordering::Relaxed),
    )
}

/// What a call gets: the runtime to drive futures with, and the link to the database
/// (apart, so a call can borrow both: `let Conn { rt, link } = conn;`).
pub struct Conn {
    pub rt: tokio::runtime::Runtime,
    pub link: Link,
}

/// The connection, made again when it broke.
pub struct Link {
    client: Option<Client>,
    config: tokio_postgres::Config,
    connector: MakeRustlsConnect,
    tls: Tls,
    url: String,
}

impl Link {
    /// The live client, connecting first (with `rt`) if needed.
    pub fn client(&mut self, rt: &tokio::runtime::Runtime) -> Result<&mut Client, PgError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let (client, connection) = rt
                .block_on(self.config.connect(self.connector.clone()))
                .map_err(|e| {
                    let detail = describe(&e);
                    match pg_tls::hint(&self.tls, &detail) {
                        Some(hint) => self.err(&format!("{detail} ({hint})")),
                        None => self.err(&detail),
                    }
                })?;
            rt.spawn(async move {
                let _ = connection.await;
            });
            self.client = Some(client);
        }
        let url = self.url.clone();
        self.client.as_mut().ok_or(PgError {
            url,
            detail: "no connection".into(),
        })
    }

    /// An error of this database's client, with what the server said.
    pub fn pg(&self, e: &tokio_postgres::Error) -> PgError {
        self.err(&describe(e))
    }

    /// An error of this database.
    pub fn err(&self, e: &dyn std::fmt::Display) -> PgError {
        PgError {
            url: self.url.clone(),
            detail: e.to_string(),
        }
    }
}

/// A database, reached through [`CONNECTIONS`] connections on threads of their own.
pub struct Pg {
    url: String,
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Pg {
    /// Connects to `url` (a `postgres://` URL; `PGPASSWORD` is used when it has no
    /// password), and brings the schema to [`SCHEMA_VERSION`]. Blocking.
    pub fn connect(url: &str) -> Result<Pg, PgError> {
        let shown = redact(url);
        let err = |detail: String| PgError {
            url: shown.clone(),
            detail,
        };
        let (url, tls) = pg_tls::split(url).map_err(err)?;
        let connector = tls.connector().map_err(err)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            err(format!(
                "not a PostgreSQL URL ({e}): write postgres://USER@HOST:PORT/DATABASE"
            ))
        })?;
        if config.get_password().is_none() {
            if let Ok(p) = std::env::var("PGPASSWORD") {
                config.password(p);
            }
        }
        if config.get_application_name().is_none() {
            config.application_name("agentbatch");
        }
        config.connect_timeout(std::time::Duration::from_secs(10));
        config.ssl_mode(tls.mode.ssl_mode());
        // The runtime is made, used and dropped on the connection's thread only: a
        // runtime may not block, nor be dropped, inside another one.
        // The connections' threads take calls from one channel: a call waits only when
        // all of them are busy.
        let (jobs, rx) = mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(Mutex::new(rx));
        for n in 0..CONNECTIONS {
            let (ready, started) = mpsc::channel::<Result<(), PgError>>();
            let (url_for_thread, config, rx) = (shown.clone(), config.clone(), rx.clone());
            let (connector, tls) = (connector.clone(), tls.clone());
            std::thread::Builder::new()
                .name(format!("agentbatch-pg-{n}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready.send(Err(PgError {
                                url: url_for_thread,
                                detail: format!("cannot start its connection's runtime: {e}"),
                            }));
                            return;
                        }
                    };
                    let mut conn = Conn {
                        rt,
                        link: Link {
                            client: None,
                            config,
                            connector,
                            tls,
                            url: url_for_thread,
                        },
                    };
                    // The first connection brings the schema up to date; the others
                    // connect when first used.
                    let migrated = if n == 0 { migrate(&mut conn) } else { Ok(()) };
                    let ok = migrated.is_ok();
                    let _ = ready.send(migrated);
                    if !ok {
                        return;
                    }
                    loop {
                        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        match job {
                            Ok(job) => job(&mut conn),
                            Err(_) => return,
                        }
                    }
                })
                .map_err(|e| err(format!("cannot start its connection's thread: {e}")))?;
            started
                .recv()
                .map_err(|_| err("its connection's thread stopped".into()))??;
        }
        Ok(Pg {
            url: shown,
            jobs: Mutex::new(jobs),
        })
    }

    /// The process's connections to `url`, made on first use and shared by every user
    /// in the process (the queue, the ledger and the rate buckets of a worker open the
    /// same database: one set of connections serves them). Blocking.
    pub fn shared(url: &str) -> Result<std::sync::Arc<Pg>, PgError> {
        use std::sync::{Arc, OnceLock, Weak};
        static OPEN: OnceLock<Mutex<std::collections::HashMap<String, Weak<Pg>>>> = OnceLock::new();
        let open = OPEN.get_or_init(Default::default);
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pg) = open.get(url).and_then(Weak::upgrade) {
            return Ok(pg);
        }
        let pg = Arc::new(Pg::connect(url)?);
        open.insert(url.to_string(), Arc::downgrade(&pg));
        Ok(pg)
    }

    /// The URL without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs the future `f` makes with the client on the connection's thread, and waits
    /// for its answer. Blocking.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl for<'c> FnOnce(
                &'c mut Client,
            )
                -> futures::future::BoxFuture<'c, Result<T, tokio_postgres::Error>>
            + Send
            + 'static,
    ) -> Result<T, PgError> {
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r = rt.block_on(f(client));
            r.map_err(|e| link.pg(&e))
        })
    }

    /// Runs `f` on the connection's thread and waits for its answer. Blocking.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, PgError> + Send + 'static,
    ) -> Result<T, PgError> {
        let started = std::time::Instant::now();
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        let gone = || PgError {
            url: self.url.clone(),
            detail: "its connection's thread has stopped".into(),
        };
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .map_err(|_| gone())?;
        let answer = rx.recv().map_err(|_| gone())?;
        {
            use std::sync::atomic::Ordering;
            CALLS.fetch_add(1, Ordering::Relaxed);
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            WAITED_NS.fetch_add(ns, Ordering::Relaxed);
        }
        answer
    }
}

/// Brings the database's schema to [`SCHEMA_VERSION`], one migration at a time, in one
/// transaction under an advisory lock (so processes starting together migrate once),
/// or refuses a database this program is too old for.
fn migrate(conn: &mut Conn) -> Result<(), PgError> {
    let Conn { rt, link } = conn;
    let url = link.url.clone();
    let err = |e: &dyn std::fmt::Display| PgError {
        url: url.clone(),
        detail: e.to_string(),
    };
    let db = |e: tokio_postgres::Error| err(&describe(&e));
    let client = link.client(rt)?;
    rt.block_on(async {
        // A current schema is only read: a user that may only read (collect, ledger)
        // must not need to write.
        let current = client
            .query_opt("SELECT version FROM agentbatch_schema WHERE id = 1", &[])
            .await;
        match current {
            Ok(Some(row)) if row.get::<_, i32>(0) == SCHEMA_VERSION => return Ok(()),
            Ok(Some(row)) if row.get::<_, i32>(0) > SCHEMA_VERSION => {
                let at: i32 = row.get(0);
                return Err(err(&format!(
                    "its agentbatch schema is version {at}, newer than this agentbatch knows ({SCHEMA_VERSION}): a newer agentbatch wrote it; run that version, or point the ledger at another database"
                )));
            }
            // Missing, older, or no table yet: migrate below.
            _ => {}
        }
        let tx = client.transaction().await.map_err(|e| {
            err(&format!(
                "cannot bring its schema to version {SCHEMA_VERSION} ({}): run agentbatch once with a user that may create tables there",
                describe(&e)
            ))
        })?;
        tx.execute("SELECT pg_advisory_xact_lock(6216736162757400)", &[])
            .await
            .map_err(db)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS agentbatch_schema (
                 id INT PRIMARY KEY CHECK (id = 1),
                 version INT NOT NULL
             )",
        )
        .await
        .map_err(db)?;
        let row = tx
            .query_opt("SELECT version FROM agentbatch_schema WHERE id = 1", &[])
            .await
            .map_err(db)?;
        let at: i32 = row.map(|r| r.get(0)).unwrap_or(0);
        if at > SCHEMA_VERSION {
            return Err(err(&format!(
                "its agentbatch schema is version {at}, newer than this agentbatch knows ({SCHEMA_VERSION}): a newer agentbatch wrote it; run that version, or point the ledger at another database"
            )));
        }
        for (i, step) in MIGRATIONS.iter().enumerate().skip(at.max(0) as usize) {
            tx.batch_execute(step).await.map_err(|e| PgError {
                url: url.clone(),
                detail: format!("cannot bring its schema to version {}: {e}", i + 1),
            })?;
        }
        tx.execute(
            "INSERT INTO agentbatch_schema (id, version) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET version = $1",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://bob:s3cret@db.example:5432/ab?sslmode=disable"),
            "postgres://bob:***@db.example:5432/ab?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://bob@db/ab?password=x&application_name=y"),
            "postgresql://bob@db/ab?password=***&application_name=y"
        );
        assert_eq!(redact("postgres://db/ab"), "postgres://db/ab");
        // A password holding '?', '/' or '@', and one given without a user part.
        for (url, shown) in [
            ("postgres://bob:pa?ss@h/d", "postgres://bob:***@h/d"),
            ("postgres://bob:pa/ss@h/d", "postgres://bob:***@h/d"),
            ("postgres://bob:p@ss@h/d", "postgres://bob:***@h/d"),
            (
                "postgres://127.0.0.1:1/x?user=postgres&password=s3cret",
                "postgres://127.0.0.1:1/x?user=postgres&password=***",
            ),
        ] {
            assert_eq!(redact(url), shown);
            assert!(has_password(url), "{url}");
        }
        assert!(has_password("postgres://a:b@h/d") && !has_password("postgres://a@h/d"));
        assert!(is_url("postgresql://h/d") && !is_url("ledger.sqlite"));
    }
}

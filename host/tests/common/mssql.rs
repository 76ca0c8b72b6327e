//! A plain tiberius client for the SQL Server tests' own statements (set-up, checks).

use takt_host::store::mssql::parse_connection_string;
use tokio_util::compat::TokioAsyncWriteCompatExt;

/// A tiberius client on a tokio TCP stream.
pub(crate) type Client = tiberius::Client<tokio_util::compat::Compat<tokio::net::TcpStream>>;

/// Logs in to the server of `url` (an ADO.NET string).
pub(crate) async fn admin(url: &str) -> Client {
    let config = parse_connection_string(url).expect("a valid TAKT_TEST_MSSQL_URL");
    let tcp = tokio::net::TcpStream::connect(config.get_addr())
        .await
        .expect("reach the test server");
    tcp.set_nodelay(true).ok();
    tiberius::Client::connect(config, tcp.compat_write())
        .await
        .expect("log in to the test server")
}

/// Runs `sql` (no parameters) and drains its results; panics with the statement on an error.
pub(crate) async fn exec(c: &mut Client, sql: &str) {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_results()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The rows of `sql`'s first result set.
pub(crate) async fn rows(c: &mut Client, sql: &str) -> Vec<tiberius::Row> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_first_result()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Whether the peer is the iridium emulator: its `@@VERSION` names it, does not name
/// Microsoft SQL Server, or cannot be read (every real server answers it).
pub(crate) async fn on_emulator(c: &mut Client) -> bool {
    match c.simple_query("SELECT @@VERSION").await {
        Ok(s) => match s.into_row().await {
            Ok(Some(r)) => {
                let v: &str = r.get(0).unwrap_or_default();
                v.to_ascii_lowercase().contains("iridium") || !v.contains("Microsoft SQL")
            }
            _ => true,
        },
        Err(_) => true,
    }
}

//! A psql-free PostgreSQL client for the tests that check a database from outside the host
//! (tokio-postgres on a runtime of its own, so a blocking test can use it).

pub(crate) struct Pg {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Pg {
    pub(crate) fn connect(url: &str) -> Pg {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            client
        });
        Pg { rt, client }
    }

    pub(crate) fn exec(&self, sql: &str) {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    pub(crate) fn rows(&self, sql: &str) -> Vec<tokio_postgres::Row> {
        self.rt
            .block_on(self.client.query(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    }

    /// The first column of the first row, a count.
    pub(crate) fn count(&self, sql: &str) -> i64 {
        self.rows(sql)[0].get(0)
    }

    /// The first column of every row, as text.
    pub(crate) fn strings(&self, sql: &str) -> Vec<String> {
        self.rows(sql).iter().map(|r| r.get(0)).collect()
    }
}

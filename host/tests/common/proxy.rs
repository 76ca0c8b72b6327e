//! A TCP proxy that a test can cut: every connection through it reset, new ones refused,
//! until restored. Stands in for a database server going away, which a shared test server
//! cannot do while other tests use it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A TCP proxy to `upstream` that can be cut (all connections reset, new ones refused) and
/// restored.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    down: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    /// How many more COMMITs (PostgreSQL or SQL Server) to deliver to the server while dropping the
    /// connection before its answer comes back.
    lose_commits: Arc<AtomicUsize>,
}

impl Proxy {
    pub(crate) fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let down = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let lose_commits: Arc<AtomicUsize> = Arc::default();
        let (d, c, l) = (down.clone(), conns.clone(), lose_commits.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let mut list = c.lock().expect("conns");
                list.push(client.try_clone().expect("clone"));
                list.push(server.try_clone().expect("clone"));
                drop(list);
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    Some(l.clone()),
                );
                pipe(server, client, None);
            }
        });
        Proxy {
            port,
            down,
            conns,
            lose_commits,
        }
    }

    /// The next `n` COMMITs sent through the proxy reach the server (and are applied), but
    /// the connection is dropped before the answer returns: the client cannot know whether
    /// its transaction committed.
    pub(crate) fn lose_commit_answers(&self, n: usize) {
        self.lose_commits.store(n, Ordering::SeqCst);
    }

    /// How many of the COMMIT answers asked to be lost are still to come (0: all were).
    #[allow(dead_code)]
    pub(crate) fn commit_answers_to_lose(&self) -> usize {
        self.lose_commits.load(Ordering::SeqCst)
    }

    pub(crate) fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for s in self.conns.lock().expect("conns").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Resets every connection through the proxy; new ones are accepted at once.
    pub(crate) fn reset(&self) {
        for s in self.conns.lock().expect("conns").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub(crate) fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`; with `lose_commits`, a chunk holding a COMMIT query (when the
/// budget allows) is forwarded and then both sides are shut, so its answer is lost.
fn pipe(mut from: TcpStream, mut to: TcpStream, lose_commits: Option<Arc<AtomicUsize>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    // PostgreSQL sends query text as UTF-8, SQL Server's TDS as UTF-16LE.
                    const COMMIT_UTF16: &[u8] = b"C\0O\0M\0M\0I\0T\0";
                    let commit = buf[..n].windows(6).any(|w| w == b"COMMIT")
                        || buf[..n].windows(12).any(|w| w == COMMIT_UTF16);
                    if commit
                        && let Some(budget) = &lose_commits
                        && budget
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                            .is_ok()
                    {
                        // The server has the COMMIT; the client side goes before the answer
                        // can come back (the other direction then fails and closes the
                        // server side).
                        let _ = from.shutdown(Shutdown::Both);
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}

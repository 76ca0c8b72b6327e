//! A small HTTP/1.1 server on 127.0.0.1 for the `http::request` tests: one thread per
//! connection, one request per connection (`Connection: close`), every request recorded, the
//! answer chosen by the test's closure — including answers that never come, so timeouts and
//! cancels can be watched from the server's side (when the client hung up).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request as the server read it.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// Path and query, as sent.
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without the query.
    pub(crate) fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// What the server does with a request.
pub(crate) enum Reply {
    /// A complete answer.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Never answers; waits until the client closes the connection and records when.
    Hang,
}

impl Reply {
    /// `status` with a body of `content_type`.
    pub(crate) fn with(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// A redirect to `location`.
    pub(crate) fn redirect(status: u16, location: &str) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
        }
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running server; it lives until the test process ends.
pub(crate) struct Server {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    hangups: Arc<Mutex<Vec<Instant>>>,
}

impl Server {
    /// Starts a server answering with `handler`.
    pub(crate) fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let hangups = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (r, h) = (requests.clone(), hangups.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (handler, r, h) = (handler.clone(), r.clone(), h.clone());
                std::thread::spawn(move || serve(stream, &*handler, &r, &h));
            }
        });
        Server {
            port,
            requests,
            hangups,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// How many requests for `path` arrived.
    pub(crate) fn hits(&self, path: &str) -> usize {
        self.requests().iter().filter(|r| r.path() == path).count()
    }

    /// When clients hung up on [`Reply::Hang`] answers, waiting up to `within` for `n` of them.
    pub(crate) fn hangups(&self, n: usize, within: Duration) -> Vec<Instant> {
        let until = Instant::now() + within;
        loop {
            let seen = self.hangups.lock().unwrap().clone();
            if seen.len() >= n || Instant::now() >= until {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn serve(
    stream: TcpStream,
    handler: &Handler,
    requests: &Mutex<Vec<Request>>,
    hangups: &Mutex<Vec<Instant>>,
) {
    let Ok(mut reader) = stream.try_clone().map(BufReader::new) else {
        return;
    };
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Request {
        method,
        target,
        headers,
        body,
    };
    requests.lock().unwrap().push(request.clone());
    let mut stream = stream;
    match handler(&request) {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (k, v) in &headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ));
            // A client that keeps only part of a big body hangs up while we write: fine.
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
            let _ = stream.flush();
        }
        Reply::Hang => {
            let mut buf = [0u8; 256];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            hangups.lock().unwrap().push(Instant::now());
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

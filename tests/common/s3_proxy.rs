//! A fault-injecting HTTP proxy in front of an S3 server (moto): it forwards each request
//! and its answer, except where its plan says to answer `503 SlowDown` instead: before
//! forwarding (throttling: the server never saw the request), or after (the server did the
//! work and the answer was lost). HTTP/1.1 with `Content-Length` or chunked bodies, one
//! upstream connection per client connection: what object_store's client speaks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// What to do to the next requests.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer the next `n` requests with 503 without forwarding them.
    Throttle(u32),
    /// Forward the next request whose method is `method` and whose path contains `path`,
    /// then answer it with 503 (the server's work is done, its answer lost).
    LoseAnswer { method: &'static str, path: String },
}

pub struct Proxy {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    plan: Arc<Mutex<Vec<Fault>>>,
    /// 503s answered.
    pub injected: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let plan = Arc::new(Mutex::new(Vec::new()));
        let injected = Arc::new(AtomicU64::new(0));
        let (p, n, up) = (Arc::clone(&plan), Arc::clone(&injected), upstream.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (p, n, up) = (Arc::clone(&p), Arc::clone(&n), up.clone());
                std::thread::spawn(move || {
                    let _ = serve(client, &up, &p, &n);
                });
            }
        });
        Proxy { endpoint, plan, injected }
    }

    /// Adds a fault to the plan (applied in order).
    pub fn inject(&self, f: Fault) {
        self.plan.lock().push(f);
    }

    /// Faults not yet applied.
    pub fn pending(&self) -> usize {
        self.plan.lock().len()
    }
}

/// A request or response: its head (start line and headers, as read) and body.
struct Message {
    head: Vec<u8>,
    start: String,
    body: Vec<u8>,
}

fn read_message(r: &mut BufReader<TcpStream>, bodiless: bool) -> std::io::Result<Option<Message>> {
    let mut head = Vec::new();
    let mut start = String::new();
    let (mut len, mut chunked) = (0usize, false);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        head.extend_from_slice(line.as_bytes());
        if start.is_empty() {
            start = line.trim_end().to_string();
            continue;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if bodiless {
    } else if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            body.extend_from_slice(size.as_bytes());
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
            if n == 0 {
                break;
            }
        }
    } else {
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Some(Message { head, start, body }))
}

fn slow_down(client: &mut TcpStream) -> std::io::Result<()> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
    write!(
        client,
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn serve(
    client: TcpStream,
    upstream: &str,
    plan: &Mutex<Vec<Fault>>,
    injected: &AtomicU64,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let mut up: Option<(TcpStream, BufReader<TcpStream>)> = None;
    while let Some(req) = read_message(&mut reader, false)? {
        let mut parts = req.start.split(' ');
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        // Decide under the lock, act outside it.
        let fault = {
            let mut p = plan.lock();
            match p.first_mut() {
                Some(Fault::Throttle(n)) => {
                    *n -= 1;
                    if *n == 0 {
                        p.remove(0);
                    }
                    Some(true)
                }
                Some(Fault::LoseAnswer { method: m, path: want })
                    if *m == method && path.contains(want.as_str()) =>
                {
                    p.remove(0);
                    Some(false)
                }
                _ => None,
            }
        };
        if fault == Some(true) {
            injected.fetch_add(1, Ordering::Relaxed);
            slow_down(&mut client)?;
            continue;
        }
        if up.is_none() {
            let s = TcpStream::connect(upstream)?;
            let r = BufReader::new(s.try_clone()?);
            up = Some((s, r));
        }
        let Some((us, ur)) = up.as_mut() else { unreachable!() };
        us.write_all(&req.head)?;
        us.write_all(&req.body)?;
        let Some(resp) = read_message(ur, method == "HEAD")? else { return Ok(()) };
        let no_body = resp.start.contains(" 204 ") || resp.start.contains(" 304 ");
        let resp = if no_body { Message { body: Vec::new(), ..resp } } else { resp };
        if fault == Some(false) {
            injected.fetch_add(1, Ordering::Relaxed);
            slow_down(&mut client)?;
        } else {
            client.write_all(&resp.head)?;
            client.write_all(&resp.body)?;
        }
    }
    Ok(())
}

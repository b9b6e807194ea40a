//! `floe ui DIR [--port N] [--bind ADDR]`: a read-only web page of a checkpoint directory.
//!
//! One static page (`ui.html` + `ui.js`, embedded, no front-end build) that polls the JSON
//! of the tool's own reports: `/api/inspect` is `floe inspect DIR --json`, `/api/show/ID`
//! is `floe show DIR ID --json`, `/api/verify` and `/api/verify/ID` are `floe verify`'s,
//! byte for byte (the same `floe::inspect` functions and the same encoder, `json_text`).
//!
//! Read-only by construction: every request opens the directory with
//! `CheckpointStorage::open_existing` (no lock, no temp file, no marker, no cleanup), and
//! the library calls run on tokio's blocking pool so that a slow disk never stalls the
//! server. A job writing to the directory is never blocked: nothing here takes its `LOCK`.
//!
//! On the binary side (included from `src/main.rs`), so that the library has no HTTP
//! server and an embedder builds no axum even with the `cli` feature's crates at hand.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use floe::inspect::{self, Report};

const PAGE: &str = include_str!("ui.html");
const SCRIPT: &str = include_str!("ui.js");

type Dir = Arc<PathBuf>;

/// Serves `dir` on `bind:port` until the process is stopped. A bad address is a usage
/// error (exit 2), as is a port that cannot be bound (in use, or not allowed).
pub fn run(dir: PathBuf, bind: &str, port: u16) -> floe::Result<ExitCode> {
    let Ok(ip) = bind.parse::<IpAddr>() else {
        eprintln!("floe: error: --bind {bind:?} is not an IP address (for example 127.0.0.1 or ::1)");
        return Ok(ExitCode::from(inspect::status::USAGE));
    };
    // The directory must be a floe directory (checked once; every request checks again).
    inspect::open_read_only(&dir)?;
    let addr = SocketAddr::new(ip, port);
    let listener = match std::net::TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    "the port is in use (choose another with --port, or 0)".to_string()
                }
                std::io::ErrorKind::AddrNotAvailable => "no such address on this machine".to_string(),
                std::io::ErrorKind::PermissionDenied => "not allowed (a port below 1024?)".to_string(),
                _ => e.to_string(),
            };
            eprintln!("floe: error: cannot listen on {addr}: {why}");
            return Ok(ExitCode::from(inspect::status::USAGE));
        }
    };
    let bound = listener.local_addr().map_err(|e| floe::Error::io("local_addr", &dir, e))?;
    listener.set_nonblocking(true).map_err(|e| floe::Error::io("set_nonblocking", &dir, e))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .map_err(|e| floe::Error::Background(format!("cannot start the web server's runtime: {e}")))?;
    let app = router(Arc::new(dir.clone()));
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| floe::Error::Background(format!("cannot listen on {bound}: {e}")))?;
        // The first line of stdout, flushed: scripts and tests read the address from it.
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "floe ui: serving {} on http://{bound}/ (read-only)", dir.display());
            let _ = out.flush();
        }
        axum::serve(listener, app)
            .await
            .map_err(|e| floe::Error::Background(format!("web server on {bound}: {e}")))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The routes: the page, its script, the reports. Other methods on these paths are 405,
/// other paths 404.
fn router(dir: Dir) -> Router {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route("/ui.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/api/inspect", get(|State(d): State<Dir>| report(d, inspect::inspect)))
        .route("/api/verify", get(|State(d): State<Dir>| report(d, |p| inspect::verify(p, None))))
        .route(
            "/api/show/{id}",
            get(|State(d): State<Dir>, UrlPath(id): UrlPath<String>| async move {
                match id.parse::<u64>() {
                    Ok(id) => report(d, move |p| inspect::show(p, Some(id))).await,
                    Err(_) => error(StatusCode::NOT_FOUND, format!("no checkpoint {id:?}")),
                }
            }),
        )
        .route(
            "/api/verify/{id}",
            get(|State(d): State<Dir>, UrlPath(id): UrlPath<String>| async move {
                match id.parse::<u64>() {
                    Ok(id) => report(d, move |p| inspect::verify(p, Some(id))).await,
                    Err(_) => error(StatusCode::NOT_FOUND, format!("no checkpoint {id:?}")),
                }
            }),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such page".into()) })
        .with_state(dir)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

fn error(status: StatusCode, what: String) -> Response {
    let body = serde_json::json!({ "error": what }).to_string() + "\n";
    (status, [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body)
        .into_response()
}

/// Runs a report on the blocking pool and answers with its `--json` text.
async fn report<R, F>(dir: Dir, f: F) -> Response
where
    R: Report + Send + 'static,
    F: FnOnce(&Path) -> floe::Result<R> + Send + 'static,
{
    match tokio::task::spawn_blocking(move || f(&dir)).await {
        Ok(Ok(r)) => match crate::json_text(&r) {
            Ok(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")],
                body,
            )
                .into_response(),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the report: {e}")),
        },
        Ok(Err(floe::Error::NotFound(what))) => error(StatusCode::NOT_FOUND, format!("not found: {what}")),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("the report failed: {e}")),
    }
}

//! Checkpoint storage on object storage, through the `object_store` crate: an [`Io`] of
//! [`Medium::Objects`] over one bucket (S3, GCS, Azure with the `cloud` feature; the
//! in-memory store always).
//!
//! A checkpoint directory is a key prefix: `s3://bucket/prefix` is the root, and a path
//! below it (`s3://bucket/prefix/data/<name>`) is the object `prefix/data/<name>`. The
//! bytes of an object are the bytes of the file (the format does not change).
//!
//! - **Writes** go to the final key, never through a rename. A manifest or the marker is
//!   always one create-only put (`PutMode::Create`, `If-None-Match: *` on S3), so it
//!   exists at most once and a writer that loses the race gets `AlreadyExists`. A data
//!   or channel-state file (named with its writer's token, so no two writers share one:
//!   `layout::with_writer_token`) is buffered up to one part ([`PART`]) and then one
//!   create-only put; a larger one becomes a multipart upload of [`PART`]-byte parts, at most [`IN_FLIGHT`] in flight
//!   (memory stays bounded whatever the file's size), completed by `sync_all`: it is
//!   invisible until then, and a handle dropped before it aborts the upload. (object_store
//!   offers no create-only completion of a multipart upload: the name was checked free
//!   before the upload began, and the manifest, always small, is the create-only put that
//!   decides.)
//! - **Reads** of a data file ([`Io::open_data`]) fetch its last [`TAIL`] bytes (index
//!   and footer; one request, which also reports the object's size) and its header; a
//!   reader then fetches the blocks of the key groups it needs, coalesced into ranges
//!   that are at most [`COALESCE`] apart and fetched [`RANGES_IN_FLIGHT`] at a time, so a
//!   rescaled instance reads only its key groups. A data file no longer than [`TAIL`], and
//!   every other object (manifests, channel-state files), is fetched whole.
//! - **Folders** are prefixes: creating, syncing or removing one does nothing; a listing
//!   is one delimited list request; `stat` of a folder is a head, then a list.
//! - **Retries**: object_store retries throttling, 5xx and transport errors with
//!   exponential backoff (`retry_config`, with the `s3` or `cloud` feature); what still fails is an `Error::Io` naming the
//!   object's URL.
//!
//! One small tokio runtime for the process runs object_store's futures; callers block on
//! them from their own threads (the library stays thread-based).

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use parking_lot::Mutex;

use super::io::{DataOpen, DataSyncer, DirEntry, EntryKind, Io, IoFile, Medium, Opened};
use crate::error::{Error, Result};

/// Size of one multipart part, and the largest file written with one put (S3 needs parts
/// of at least 5 MiB but the last).
pub const PART: usize = 8 << 20;
/// Parts of one file uploading at once.
pub const IN_FLIGHT: usize = 2;
/// Bytes fetched from the end of a data file when it is opened: its index and footer
/// (an index is 32 bytes per block, so this covers files of ~2000 blocks in one request;
/// a longer index costs one more). The same as a local file's.
pub const TAIL: u64 = crate::format::TAIL;
/// Ranges of blocks at most this far apart are fetched as one (the bytes between cost
/// less than another request: object_store's own default).
pub const COALESCE: u64 = 1 << 20;
/// Range requests of one reader in flight at once.
pub const RANGES_IN_FLIGHT: usize = 8;

/// Requests an [`ObjectIo`] made (shared by the handles on one store; the benchmark
/// prints them).
#[derive(Debug, Default)]
pub struct ObjectStats {
    /// Single-request puts (whole objects).
    pub puts: AtomicU64,
    /// Multipart uploads started (one request each, and one to complete it).
    pub multipart_uploads: AtomicU64,
    /// Parts uploaded.
    pub parts: AtomicU64,
    /// Bytes uploaded.
    pub bytes_put: AtomicU64,
    /// Gets (whole objects or ranges) and heads.
    pub gets: AtomicU64,
    /// Bytes read.
    pub bytes_got: AtomicU64,
    /// List requests (one per listed prefix).
    pub lists: AtomicU64,
    /// Deletes.
    pub deletes: AtomicU64,
}

impl ObjectStats {
    /// Upload requests: single puts, plus per multipart upload its create, its parts and
    /// its completion.
    pub fn put_requests(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
            + 2 * self.multipart_uploads.load(Ordering::Relaxed)
            + self.parts.load(Ordering::Relaxed)
    }

    /// Objects written (a multipart upload is one object).
    pub fn objects_written(&self) -> u64 {
        self.puts.load(Ordering::Relaxed) + self.multipart_uploads.load(Ordering::Relaxed)
    }
}

/// One bucket, as the process shares it.
struct Bucket {
    store: Arc<dyn ObjectStore>,
    stats: Arc<ObjectStats>,
}

/// The buckets opened so far, by `scheme://bucket` (so `memory://` stores live as long as
/// the process and every handle on one bucket shares its HTTP client).
fn buckets() -> &'static Mutex<HashMap<String, Arc<Bucket>>> {
    static B: OnceLock<Mutex<HashMap<String, Arc<Bucket>>>> = OnceLock::new();
    B.get_or_init(|| Mutex::new(HashMap::new()))
}

fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("floe-object-io")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| io::Error::other(format!("object-store runtime: {e}")))
}

fn block_on<F: std::future::Future>(f: F) -> io::Result<F::Output> {
    Ok(runtime()?.block_on(f))
}

/// Retries of transient errors (throttling, 5xx, timeouts, connection resets):
/// exponential backoff from 100 ms to 15 s, at most 10 retries within 3 minutes.
#[cfg(any(feature = "cloud", feature = "s3"))]
pub fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(15),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: std::time::Duration::from_secs(180),
    }
}

/// The URL schemes of object storage floe opens.
const SCHEMES: [&str; 4] = ["memory", "s3", "gs", "az"];

/// Where a checkpoint directory string points.
pub(crate) enum Location {
    /// A local directory (a plain path, or `file:///...`).
    Local(PathBuf),
    /// A prefix of a bucket: `root` is the URL as a path, `bucket` is `scheme://bucket`.
    Object { root: PathBuf, scheme: String, bucket: String },
}

/// Parses a checkpoint directory: `file:///abs/path` and plain paths are local;
/// `memory://NAME[/prefix]`, `s3://bucket[/prefix]`, `gs://...` and `az://container/...`
/// are object storage. Any other `scheme://` is a usage error.
pub(crate) fn locate(dir: &Path) -> Result<Location> {
    let Some(s) = dir.to_str() else { return Ok(Location::Local(dir.to_path_buf())) };
    let Some((scheme, rest)) = s.split_once("://") else { return Ok(Location::Local(dir.to_path_buf())) };
    if !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) || scheme.is_empty() {
        return Ok(Location::Local(dir.to_path_buf()));
    }
    if scheme == "file" {
        if !rest.starts_with('/') {
            return Err(Error::InvalidConfig(format!(
                "{s}: a file URL needs an absolute path (file:///...)"
            )));
        }
        return Ok(Location::Local(PathBuf::from(rest)));
    }
    if !SCHEMES.contains(&scheme) {
        return Err(Error::InvalidConfig(format!(
            "{s}: unknown storage scheme {scheme}:// (floe opens paths, file://, memory://, s3://, gs://, az://)"
        )));
    }
    let rest = rest.trim_end_matches('/');
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::InvalidConfig(format!("{s}: no bucket named")));
    }
    if !prefix.is_empty() {
        Key::parse(prefix)
            .map_err(|e| Error::InvalidConfig(format!("{s}: not a valid object prefix: {e}")))?;
    }
    let bucket_url = format!("{scheme}://{bucket}");
    let root = if prefix.is_empty() { bucket_url.clone() } else { format!("{bucket_url}/{prefix}") };
    Ok(Location::Object { root: PathBuf::from(root), scheme: scheme.to_string(), bucket: bucket_url })
}

fn build_store(scheme: &str, bucket_url: &str) -> Result<Arc<dyn ObjectStore>> {
    #[cfg(any(feature = "cloud", feature = "s3"))]
    let name = bucket_url.split_once("://").map_or(bucket_url, |(_, b)| b);
    match scheme {
        "memory" => Ok(Arc::new(object_store::memory::InMemory::new())),
        #[cfg(any(feature = "cloud", feature = "s3"))]
        "s3" => {
            // The `s3` feature builds rustls without a default crypto provider: make ring
            // the process default unless one is installed (by the embedder, or by `cloud`'s
            // aws-lc-rs build, which reqwest then uses).
            #[cfg(all(feature = "s3", not(feature = "cloud")))]
            let _already_installed = rustls::crypto::ring::default_provider().install_default();
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(name)
                .with_retry(retry_config())
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
                .map_err(|e| Error::InvalidConfig(format!("{bucket_url}: {e}")))
        }
        #[cfg(feature = "cloud")]
        "gs" => object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(name)
            .with_retry(retry_config())
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| Error::InvalidConfig(format!("{bucket_url}: {e}"))),
        #[cfg(feature = "cloud")]
        "az" => object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_container_name(name)
            .with_retry(retry_config())
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| Error::InvalidConfig(format!("{bucket_url}: {e}"))),
        _ => Err(Error::InvalidConfig(format!(
            "{bucket_url}: this floe was built without {scheme}:// support (build with `--features cloud`; or `--features s3` for s3:// alone)"
        ))),
    }
}

/// The I/O for a checkpoint directory string: [`super::rooted::RootedIo`] below a local path (and the
/// path), an [`ObjectIo`] of its own (tracking what this handle creates) for a URL.
pub(crate) fn resolve(dir: &Path) -> Result<(PathBuf, Arc<dyn Io>)> {
    match locate(dir)? {
        Location::Local(p) => {
            let io = Arc::new(super::rooted::RootedIo::new(&p));
            Ok((p, io))
        }
        Location::Object { root, scheme, bucket } => {
            let io = ObjectIo::open(&scheme, &bucket)?;
            Ok((root, Arc::new(io)))
        }
    }
}

/// The requests made so far on the bucket of `dir` (`None` for a local directory or a
/// bucket not opened yet).
pub fn stats_of(dir: &Path) -> Option<Arc<ObjectStats>> {
    match locate(dir).ok()? {
        Location::Local(_) => None,
        Location::Object { bucket, .. } => buckets().lock().get(&bucket).map(|b| Arc::clone(&b.stats)),
    }
}

/// An [`Io`] over one bucket (see the module documentation).
pub struct ObjectIo {
    bucket: Arc<Bucket>,
    /// `scheme://bucket`: stripped from a path to make its key.
    url: String,
    /// Keys this handle created (see [`Io::created_here`]).
    created: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for ObjectIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectIo").field("url", &self.url).finish()
    }
}

impl ObjectIo {
    /// A handle on `scheme://bucket` (the bucket's client is built once per process).
    pub(crate) fn open(scheme: &str, bucket_url: &str) -> Result<ObjectIo> {
        let bucket = {
            let mut all = buckets().lock();
            match all.get(bucket_url) {
                Some(b) => Arc::clone(b),
                None => {
                    let b = Arc::new(Bucket {
                        store: build_store(scheme, bucket_url)?,
                        stats: Arc::new(ObjectStats::default()),
                    });
                    all.insert(bucket_url.to_string(), Arc::clone(&b));
                    b
                }
            }
        };
        Ok(ObjectIo { bucket, url: bucket_url.to_string(), created: Arc::new(Mutex::new(HashSet::new())) })
    }

    /// The key of `path`, which must lie in this bucket. Object paths are normalized by
    /// object_store's rules: no empty, `.` or `..` segment, so no path leaves its prefix.
    fn key(&self, path: &Path) -> io::Result<Key> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let s = path.to_str().ok_or_else(|| invalid(format!("{} is not UTF-8", path.display())))?;
        let rest = s
            .strip_prefix(self.url.as_str())
            .ok_or_else(|| invalid(format!("{s} is not in {}", self.url)))?
            .trim_start_matches('/');
        Key::parse(rest).map_err(|e| invalid(format!("{s}: {e}")))
    }

    fn store(&self) -> &dyn ObjectStore {
        &*self.bucket.store
    }
}

/// object_store's error as an I/O error of the matching kind (the message names the key).
fn io_err(e: object_store::Error) -> io::Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => {
            io::ErrorKind::AlreadyExists
        }
        object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. } => {
            io::ErrorKind::Unsupported
        }
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// A file being uploaded (see the module documentation).
struct ObjectFile {
    bucket: Arc<Bucket>,
    key: Key,
    created: Arc<Mutex<HashSet<String>>>,
    buf: Vec<u8>,
    /// Multipart above [`PART`] bytes (data and channel-state files); anything else (a
    /// manifest, the marker) is always one create-only put, whatever its size.
    multipart: bool,
    upload: Option<WriteMultipart>,
    /// Bytes handed to the multipart upload.
    sent: u64,
    done: bool,
}

impl ObjectFile {
    fn start_multipart(&mut self) -> io::Result<()> {
        let rt = runtime()?;
        let upload = rt.block_on(self.bucket.store.put_multipart(&self.key)).map_err(io_err)?;
        self.bucket.stats.multipart_uploads.fetch_add(1, Ordering::Relaxed);
        self.upload = Some(WriteMultipart::new_with_chunk_size(upload, PART));
        Ok(())
    }

    /// Whether the object at this handle's key holds exactly `bytes`.
    fn holds(&self, bytes: &[u8]) -> io::Result<bool> {
        let got = block_on(async {
            let r = self.bucket.store.get(&self.key).await?;
            r.bytes().await
        })?;
        self.bucket.stats.gets.fetch_add(1, Ordering::Relaxed);
        match got {
            Ok(b) => Ok(b.as_ref() == bytes),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Hands `data` to the multipart upload, waiting first until fewer than
    /// [`IN_FLIGHT`] parts are uploading.
    fn feed(&mut self, data: &[u8]) -> io::Result<()> {
        let rt = runtime()?;
        let Some(up) = self.upload.as_mut() else { return Ok(()) };
        rt.block_on(up.wait_for_capacity(IN_FLIGHT)).map_err(io_err)?;
        let _in_rt = rt.enter();
        up.write(data);
        self.sent += data.len() as u64;
        Ok(())
    }
}

impl Write for ObjectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.done {
            return Err(io::Error::other("write after the object was published"));
        }
        if self.upload.is_none() {
            self.buf.extend_from_slice(data);
            if self.multipart && self.buf.len() > PART {
                self.start_multipart()?;
                let pending = std::mem::take(&mut self.buf);
                self.feed(&pending)?;
            }
        } else {
            self.feed(data)?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl IoFile for ObjectFile {
    /// Publishes the object: one create-only put, or the multipart upload's completion.
    fn sync_all(&mut self) -> io::Result<()> {
        if self.done {
            return Ok(());
        }
        let stats = &self.bucket.stats;
        match self.upload.take() {
            None => {
                let bytes = std::mem::take(&mut self.buf);
                let len = bytes.len() as u64;
                let payload = PutPayload::from(bytes.clone());
                let opts = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
                let put = block_on(self.bucket.store.put_opts(&self.key, payload, opts))?;
                stats.puts.fetch_add(1, Ordering::Relaxed);
                stats.bytes_put.fetch_add(len, Ordering::Relaxed);
                match put {
                    Ok(_) => {}
                    // A retried put (object_store retries a 5xx whatever the method) finds
                    // the object its first attempt created, when only the answer was lost:
                    // the same bytes there are this put's success, not another writer's.
                    Err(
                        e @ (object_store::Error::AlreadyExists { .. }
                        | object_store::Error::Precondition { .. }),
                    ) => {
                        if !self.holds(&bytes)? {
                            self.buf = bytes;
                            return Err(io_err(e));
                        }
                    }
                    Err(e) => {
                        self.buf = bytes;
                        return Err(io_err(e));
                    }
                }
            }
            Some(up) => {
                block_on(up.finish())?.map_err(io_err)?;
                // WriteMultipart sends a part per PART bytes, and the rest at the finish.
                stats.parts.fetch_add(self.sent.div_ceil(PART as u64), Ordering::Relaxed);
                stats.bytes_put.fetch_add(self.sent, Ordering::Relaxed);
            }
        }
        self.created.lock().insert(self.key.to_string());
        self.done = true;
        Ok(())
    }
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>> {
        Ok(Box::new(NoSyncer))
    }
    fn is_direct(&self) -> bool {
        false
    }
    fn set_direct(&mut self, _on: bool) -> io::Result<bool> {
        Ok(false)
    }
}

impl Drop for ObjectFile {
    fn drop(&mut self) {
        // Never completed: the parts uploaded so far are aborted (what a crash leaves is
        // for the bucket's lifecycle rule on incomplete multipart uploads; see README).
        if let Some(up) = self.upload.take()
            && let Ok(rt) = runtime()
        {
            let _ = rt.block_on(up.abort());
        }
    }
}

/// Objects are durable when their upload completes: nothing to sync before.
struct NoSyncer;

impl DataSyncer for NoSyncer {
    fn sync_data(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Io for ObjectIo {
    fn medium(&self) -> Medium {
        Medium::Objects
    }
    fn created_here(&self, path: &Path) -> bool {
        self.key(path).is_ok_and(|k| self.created.lock().contains(k.as_ref()))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        let key = self.key(path)?;
        let multipart = key.filename().is_some_and(|n| super::layout::parse_data_file_name(n).is_some());
        Ok(Box::new(ObjectFile {
            bucket: Arc::clone(&self.bucket),
            key,
            created: Arc::clone(&self.created),
            buf: Vec::new(),
            multipart,
            upload: None,
            sent: 0,
            done: false,
        }))
    }
    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{}: floe never renames on object storage", from.display()),
        ))
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let key = self.key(path)?;
        block_on(self.store().delete(&key))?.map_err(io_err)?;
        self.bucket.stats.deletes.fetch_add(1, Ordering::Relaxed);
        self.created.lock().remove(key.as_ref());
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.key(path).map(|_| ())
    }
    fn remove_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let key = self.key(dir)?;
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let listed = block_on(self.store().list_with_delimiter(prefix))?.map_err(io_err)?;
        self.bucket.stats.lists.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        for o in listed.objects {
            if let Some(name) = o.location.filename() {
                out.push(DirEntry { name: name.to_string(), kind: EntryKind::File });
            }
        }
        for p in listed.common_prefixes {
            if let Some(name) = p.filename() {
                out.push(DirEntry { name: name.to_string(), kind: EntryKind::Dir });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
        let key = self.key(path)?;
        if key.as_ref().is_empty() {
            return Ok((EntryKind::Dir, 0));
        }
        self.bucket.stats.gets.fetch_add(1, Ordering::Relaxed);
        match block_on(self.store().head(&key))? {
            Ok(meta) => return Ok((EntryKind::File, meta.size)),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(io_err(e)),
        }
        // A prefix that holds objects is a folder.
        if self.list_dir(path)?.is_empty() {
            Err(io::Error::new(io::ErrorKind::NotFound, format!("{}: no such object", path.display())))
        } else {
            Ok((EntryKind::Dir, 0))
        }
    }
    fn open_read(&self, path: &Path) -> Result<Opened> {
        let key = self.key(path).map_err(|e| Error::io("open", path, e))?;
        let got = block_on(async {
            let r = self.store().get(&key).await?;
            r.bytes().await
        })
        .map_err(|e| Error::io("get", path, e))?
        .map_err(|e| Error::io("get", path, io_err(e)))?;
        self.bucket.stats.gets.fetch_add(1, Ordering::Relaxed);
        self.bucket.stats.bytes_got.fetch_add(got.len() as u64, Ordering::Relaxed);
        Ok(Opened::Memory(io::Cursor::new(Vec::from(got))))
    }
    fn open_data(&self, dir: &Path, rel: &str, _listed_size: u64) -> Result<DataOpen> {
        let path = &dir.join(rel);
        let key = self.key(path).map_err(|e| Error::io("open", path, e))?;
        let opts = object_store::GetOptions {
            range: Some(object_store::GetRange::Suffix(TAIL)),
            ..Default::default()
        };
        let (len, tail) = block_on(async {
            let r = self.store().get_opts(&key, opts).await?;
            let len = r.meta.size;
            r.bytes().await.map(|b| (len, b))
        })
        .map_err(|e| Error::io("get", path, e))?
        .map_err(|e| Error::io("get", path, io_err(e)))?;
        self.bucket.stats.gets.fetch_add(1, Ordering::Relaxed);
        self.bucket.stats.bytes_got.fetch_add(tail.len() as u64, Ordering::Relaxed);
        let tail = Vec::from(tail);
        if tail.len() as u64 >= len {
            return Ok(DataOpen::Whole(Opened::Memory(io::Cursor::new(tail))));
        }
        let source = Arc::new(ObjectRanges {
            store: Arc::clone(&self.bucket.store),
            stats: Arc::clone(&self.bucket.stats),
            key,
        });
        let tail_start = len - tail.len() as u64;
        let head_len = (crate::format::DATA_HEADER_LEN as u64).min(tail_start);
        let mut head = crate::format::RangeSource::read_range(&*source, 0..head_len)
            .map_err(|e| Error::io("get", path, e))?;
        if head_len < crate::format::DATA_HEADER_LEN as u64 {
            // Head and tail meet: that is the whole object.
            head.extend_from_slice(&tail);
            return Ok(DataOpen::Whole(Opened::Memory(io::Cursor::new(head))));
        }
        Ok(DataOpen::Ranges(crate::format::RangedParts { len, head, tail_start, tail, source }))
    }
}

/// Range reads of one object (a ranged data file's blocks).
struct ObjectRanges {
    store: Arc<dyn ObjectStore>,
    stats: Arc<ObjectStats>,
    key: Key,
}

impl crate::format::RangeSource for ObjectRanges {
    fn read_ranges(&self, ranges: &[std::ops::Range<u64>]) -> io::Result<Vec<Vec<u8>>> {
        // Coalesce (in offset order), fetch the merged ranges a few at a time, then cut
        // each asked range out of the merged range holding it.
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges[i].start);
        let mut merged: Vec<std::ops::Range<u64>> = Vec::new();
        for &i in &order {
            let r = &ranges[i];
            match merged.last_mut() {
                Some(m) if r.start <= m.end.saturating_add(COALESCE) => m.end = m.end.max(r.end),
                _ => merged.push(r.clone()),
            }
        }
        let rt = runtime()?;
        let mut fetched: Vec<Vec<u8>> = Vec::with_capacity(merged.len());
        for wave in merged.chunks(RANGES_IN_FLIGHT) {
            let handles: Vec<_> = wave
                .iter()
                .map(|m| {
                    let (store, key, m) = (Arc::clone(&self.store), self.key.clone(), m.clone());
                    rt.spawn(async move { store.get_range(&key, m).await })
                })
                .collect();
            for h in handles {
                let b = rt
                    .block_on(h)
                    .map_err(|e| io::Error::other(format!("range read of {}: {e}", self.key)))?
                    .map_err(io_err)?;
                self.stats.gets.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes_got.fetch_add(b.len() as u64, Ordering::Relaxed);
                fetched.push(Vec::from(b));
            }
        }
        let mut out = vec![Vec::new(); ranges.len()];
        for (i, r) in ranges.iter().enumerate() {
            // The merged range holding `r`: the last one starting at or before it.
            let m = merged.partition_point(|m| m.start <= r.start).saturating_sub(1);
            let (Some(mr), Some(bytes)) = (merged.get(m), fetched.get(m)) else {
                return Err(io::Error::other("no range fetched"));
            };
            let (lo, hi) =
                (r.start.saturating_sub(mr.start) as usize, r.end.saturating_sub(mr.start) as usize);
            match bytes.get(lo..hi) {
                Some(b) => out[i] = b.to_vec(),
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{}: bytes {}..{} past the end of the object", self.key, r.start, r.end),
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert!(
            matches!(locate(Path::new("/tmp/x")).unwrap(), Location::Local(p) if p == Path::new("/tmp/x"))
        );
        assert!(
            matches!(locate(Path::new("file:///tmp/x")).unwrap(), Location::Local(p) if p == Path::new("/tmp/x"))
        );
        assert!(locate(Path::new("file://tmp/x")).is_err());
        assert!(locate(Path::new("ftp://h/x")).is_err());
        assert!(locate(Path::new("s3:///x")).is_err());
        assert!(locate(Path::new("s3://b/a/../x")).is_err());
        match locate(Path::new("s3://b/p/q/")).unwrap() {
            Location::Object { root, scheme, bucket } => {
                assert_eq!(
                    (root.to_str().unwrap(), scheme.as_str(), bucket.as_str()),
                    ("s3://b/p/q", "s3", "s3://b")
                );
            }
            Location::Local(_) => panic!("s3 is not local"),
        }
    }

    #[test]
    fn small_objects_are_create_only_and_large_ones_multipart() {
        let (root, io) = resolve(Path::new("memory://object-unit/r")).unwrap();
        let p = root.join("a");
        let mut f = io.create_new(&p).unwrap();
        f.write_all(b"one").unwrap();
        f.sync_all().unwrap();
        let mut g = io.create_new(&p).unwrap();
        g.write_all(b"two").unwrap();
        assert_eq!(g.sync_all().unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let big = root.join("data").join("00000000000000000001-op-00000000-0.full");
        let mut h = io.create_new(&big).unwrap();
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..(PART * 3 / chunk.len() + 1) {
            h.write_all(&chunk).unwrap();
        }
        assert_eq!(io.stat(&big).unwrap_err().kind(), io::ErrorKind::NotFound, "invisible before complete");
        h.sync_all().unwrap();
        assert_eq!(
            io.stat(&big).unwrap(),
            (EntryKind::File, (PART * 3 / chunk.len() + 1) as u64 * (1 << 20))
        );
        assert_eq!(io.stat(&root.join("data")).unwrap().0, EntryKind::Dir);
        // A manifest is one create-only put whatever its size: of two, one wins.
        let m = root.join("chk-00000000000000000001.manifest");
        for (i, want) in [(1u8, Ok(())), (2, Err(io::ErrorKind::AlreadyExists))] {
            let mut f = io.create_new(&m).unwrap();
            f.write_all(&vec![i; PART * 2]).unwrap();
            assert_eq!(f.sync_all().map_err(|e| e.kind()), want);
        }
        let mut got = Vec::new();
        io::Read::read_to_end(&mut io.open_read(&m).unwrap(), &mut got).unwrap();
        assert!(got.len() == PART * 2 && got.iter().all(|&b| b == 1), "the first manifest stands");
        let names: Vec<_> = io.list_dir(&root).unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
        assert_eq!(
            names,
            vec![
                ("a".into(), EntryKind::File),
                ("chk-00000000000000000001.manifest".into(), EntryKind::File),
                ("data".into(), EntryKind::Dir)
            ]
        );
        // A dropped, unfinished multipart upload publishes nothing.
        let never = root.join("data").join("00000000000000000002-op-00000000-0.full");
        let mut d = io.create_new(&never).unwrap();
        d.write_all(&vec![1u8; PART + 1]).unwrap();
        drop(d);
        assert_eq!(io.stat(&never).unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}

//! [`KeyValueStore`] over MPI: rank 0 keeps the values in a thread of its own, which answers
//! every rank's requests (its own included) on a communicator duplicated for the store, so
//! that they never meet the Trainer's collectives. Any thread of any rank may ask: MPI must
//! run at `MPI_THREAD_MULTIPLE`.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ember_plan::collective::KeyValueStore;
use mpi::point_to_point::{Message, Status};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// The tag of requests to rank 0; replies carry the tag the request named.
const REQUEST: i32 = 1;
/// Reply tags run from here, one per request in flight from a process, up to
/// [`LAST_REPLY_TAG`] (MPI guarantees tags up to 32767) and round again.
const FIRST_REPLY_TAG: i32 = 2;
const LAST_REPLY_TAG: i32 = 32_767;
/// How long a poll sleeps when nothing came: rank 0's thread between requests (checking the
/// waiting gets' deadlines), a rank between looks for its answer.
const IDLE: Duration = Duration::from_millis(1);

/// The store, as one rank sees it.
pub struct MpiKeyValueStore {
    /// A duplicate of the world for the store's messages. Never freed: freeing must come
    /// before MPI is finalised, and a PJRT client may hold the store until the process ends;
    /// `MPI_Finalize` releases it.
    comm: ManuallyDrop<SimpleCommunicator>,
    /// The next reply tag this process hands out.
    next_tag: AtomicI32,
    /// Set when the collective closes the store: later calls fail instead of reaching MPI,
    /// which may be finalised by then.
    closed: AtomicBool,
    /// Rank 0's server thread, until the store closes.
    server: Mutex<Option<JoinHandle<()>>>,
}

// SAFETY: the store is only made when MPI provides MPI_THREAD_MULTIPLE, under which a
// communicator may be used from several threads at the same time.
unsafe impl Send for MpiKeyValueStore {}
// SAFETY: as above.
unsafe impl Sync for MpiKeyValueStore {}

/// What a rank asks of rank 0.
enum Request {
    Put { key: String, value: Vec<u8> },
    Get { key: String, timeout: Duration },
    TryGet { key: String },
    Stop,
}

/// How rank 0 answers: the value, none (absent, or not put within the timeout), or the store
/// closed while the request waited.
const FOUND: u8 = 0;
const NONE: u8 = 1;
const CLOSED: u8 = 2;

impl Request {
    /// The request as bytes, with the tag its reply should carry: the kind, the tag, the
    /// timeout in ms, the key's length, the key, then the value.
    fn encode(&self, reply_tag: i32) -> Vec<u8> {
        let (kind, key, timeout, value): (u8, &str, u64, &[u8]) = match self {
            Request::Put { key, value } => (0, key, 0, value),
            Request::Get { key, timeout } => (1, key, timeout.as_millis() as u64, &[]),
            Request::TryGet { key } => (2, key, 0, &[]),
            Request::Stop => (3, "", 0, &[]),
        };
        let mut bytes = Vec::with_capacity(17 + key.len() + value.len());
        bytes.push(kind);
        bytes.extend_from_slice(&reply_tag.to_le_bytes());
        bytes.extend_from_slice(&timeout.to_le_bytes());
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(value);
        bytes
    }

    /// A request and its reply tag, from [`encode`](Self::encode)'s bytes.
    fn decode(bytes: &[u8]) -> Option<(Request, i32)> {
        let kind = *bytes.first()?;
        let reply_tag = i32::from_le_bytes(bytes.get(1..5)?.try_into().ok()?);
        let timeout = u64::from_le_bytes(bytes.get(5..13)?.try_into().ok()?);
        let key_len = u32::from_le_bytes(bytes.get(13..17)?.try_into().ok()?) as usize;
        let key = String::from_utf8(bytes.get(17..17 + key_len)?.to_vec()).ok()?;
        let value = bytes[17 + key_len..].to_vec();
        let request = match kind {
            0 => Request::Put { key, value },
            1 => Request::Get {
                key,
                timeout: Duration::from_millis(timeout),
            },
            2 => Request::TryGet { key },
            3 => Request::Stop,
            _ => return None,
        };
        Some((request, reply_tag))
    }
}

impl MpiKeyValueStore {
    /// Makes the store on a duplicate of `world`; rank 0 starts the thread that keeps the
    /// values. Collective: every rank calls it.
    pub(crate) fn new(world: &SimpleCommunicator) -> anyhow::Result<Arc<Self>> {
        let store = Arc::new(Self {
            comm: ManuallyDrop::new(world.duplicate()),
            next_tag: AtomicI32::new(FIRST_REPLY_TAG),
            closed: AtomicBool::new(false),
            server: Mutex::new(None),
        });
        if world.rank() == 0 {
            let served = Arc::clone(&store);
            let thread = std::thread::Builder::new()
                .name("ember-kv-store".into())
                .spawn(move || serve(&served.comm))
                .context("starting the key-value store's thread")?;
            *store.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        }
        Ok(store)
    }

    /// Sends `request` to rank 0 and waits for its answer.
    fn ask(&self, request: &Request) -> anyhow::Result<Option<Vec<u8>>> {
        if self.closed.load(Ordering::Acquire) {
            bail!("the key-value store is closed: its run's collective was dropped");
        }
        let tag = self
            .next_tag
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(if t == LAST_REPLY_TAG {
                    FIRST_REPLY_TAG
                } else {
                    t + 1
                })
            })
            .expect("the closure always gives a tag");
        let root = self.comm.process_at_rank(0);
        root.send_with_tag(&request.encode(tag)[..], REQUEST);
        let mut reply = wait_for(|| root.immediate_matched_probe_with_tag(tag));
        match reply.first().copied() {
            Some(FOUND) => {
                reply.remove(0);
                Ok(Some(reply))
            }
            Some(NONE) => Ok(None),
            Some(CLOSED) => bail!("the key-value store closed while this request waited"),
            other => bail!("the key-value store answered {other:?}, which no request expects"),
        }
    }

    /// Ends the store: waits until every rank has reached this point, then rank 0 stops its
    /// thread. Collective; called by the collective before MPI is finalised.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.comm.barrier();
        let server = self.server.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(server) = server {
            let root = self.comm.process_at_rank(0);
            root.send_with_tag(&Request::Stop.encode(FIRST_REPLY_TAG)[..], REQUEST);
            let _ = server.join();
        }
    }
}

impl KeyValueStore for MpiKeyValueStore {
    fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let request = Request::Put {
            key: key.to_owned(),
            value: value.to_vec(),
        };
        self.ask(&request).map(drop)
    }

    fn get(&self, key: &str, timeout: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        let key = key.to_owned();
        self.ask(&Request::Get { key, timeout })
    }

    fn try_get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.ask(&Request::TryGet {
            key: key.to_owned(),
        })
    }
}

/// The bytes of the message `probe` finds, polling every [`IDLE`] until it finds one (a
/// blocking receive would spin a core for as long as a get waits).
fn wait_for(probe: impl Fn() -> Option<(Message, Status)>) -> Vec<u8> {
    loop {
        if let Some(found) = probe() {
            return found.matched_receive_vec().0;
        }
        std::thread::sleep(IDLE);
    }
}

/// A get waiting for its key.
struct Waiting {
    source: i32,
    reply_tag: i32,
    key: String,
    deadline: Instant,
}

/// Rank 0's thread: keeps the values and answers requests until one says stop.
fn serve(comm: &SimpleCommunicator) {
    let mut values: HashMap<String, Vec<u8>> = HashMap::new();
    let mut waiting: Vec<Waiting> = Vec::new();
    let answer = |source: i32, tag: i32, status: u8, value: &[u8]| {
        let mut reply = Vec::with_capacity(1 + value.len());
        reply.push(status);
        reply.extend_from_slice(value);
        comm.process_at_rank(source).send_with_tag(&reply[..], tag);
    };
    loop {
        // Polled, not a blocking probe: OpenMPI's blocking calls spin a core while they wait.
        let Some(probed) = comm.any_process().immediate_matched_probe_with_tag(REQUEST) else {
            let now = Instant::now();
            waiting.retain(|w| {
                let expired = w.deadline <= now;
                if expired {
                    answer(w.source, w.reply_tag, NONE, &[]);
                }
                !expired
            });
            std::thread::sleep(IDLE);
            continue;
        };
        let (bytes, status): (Vec<u8>, Status) = probed.matched_receive_vec();
        let source = status.source_rank();
        let Some((request, tag)) = Request::decode(&bytes) else {
            tracing::error!(source, "key-value store: a request it cannot read");
            continue;
        };
        match request {
            Request::Put { key, value } => {
                waiting.retain(|w| {
                    let served = w.key == key;
                    if served {
                        answer(w.source, w.reply_tag, FOUND, &value);
                    }
                    !served
                });
                values.insert(key, value);
                answer(source, tag, FOUND, &[]);
            }
            Request::Get { key, timeout } => match values.get(&key) {
                Some(value) => answer(source, tag, FOUND, value),
                None => waiting.push(Waiting {
                    source,
                    reply_tag: tag,
                    key,
                    deadline: Instant::now() + timeout,
                }),
            },
            Request::TryGet { key } => match values.get(&key) {
                Some(value) => answer(source, tag, FOUND, value),
                None => answer(source, tag, NONE, &[]),
            },
            Request::Stop => {
                for w in waiting {
                    answer(w.source, w.reply_tag, CLOSED, &[]);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_survive_encoding() {
        let put = Request::Put {
            key: "topology/1".into(),
            value: vec![0, 1, 255],
        };
        let Some((Request::Put { key, value }, 7)) = Request::decode(&put.encode(7)) else {
            panic!("a put decodes as a put");
        };
        assert_eq!(
            (key.as_str(), value.as_slice()),
            ("topology/1", &[0, 1, 255][..])
        );
        let get = Request::Get {
            key: "k".into(),
            timeout: Duration::from_millis(1500),
        };
        let Some((Request::Get { key, timeout }, 9)) = Request::decode(&get.encode(9)) else {
            panic!("a get decodes as a get");
        };
        assert_eq!((key.as_str(), timeout), ("k", Duration::from_millis(1500)));
        assert!(matches!(
            Request::decode(&Request::Stop.encode(2)),
            Some((Request::Stop, 2))
        ));
        assert!(Request::decode(&[9, 0, 0]).is_none());
    }
}

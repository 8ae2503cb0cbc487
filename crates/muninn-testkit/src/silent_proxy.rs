//! A TCP proxy a test can make fall silent: [`SilentProxy`].
//!
//! A database server that stops answering without closing the connection — a network
//! partition, a frozen machine, a firewall that drops the flow — is not something a real server
//! can be asked to do. This proxy sits between a client and the real server and, when
//! [frozen](SilentProxy::freeze), forwards nothing in either direction while keeping every
//! socket open: the client's writes are accepted by its kernel, its reads wait.
//! [Thawing](SilentProxy::thaw) forwards what waited. [Abandoning](SilentProxy::abandon) leaves the
//! connections open so far silent for good while new ones flow: a flow lost in the network
//! while the server itself is fine, which only a new connection gets past. [Holding new
//! connections](SilentProxy::hold_new) is the reverse: the connections open so far flow, new
//! ones wait until thawed (a client that reconnects while the network lets no new flow through).
//!
//! [Cutting after a commit](SilentProxy::cut_after_commit) is the narrowest fault: the first
//! connection whose client sends some bytes (a value the test put in a row) has its next
//! `COMMIT` forwarded to the server — which commits — and then falls silent for good, so the
//! server's answer never reaches the client. The client sees its call time out on a commit
//! that landed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which connections are silent: all while frozen, those numbered from `held_from` on until
/// thawed, and those numbered below `abandoned_below` and the one cut after its commit, for
/// good.
#[derive(Debug, Clone, Default)]
struct Silence {
    frozen: bool,
    held_from: Option<u64>,
    abandoned_below: u64,
    cut: BTreeSet<u64>,
}

impl Silence {
    fn silences(&self, connection: u64) -> bool {
        self.frozen
            || self.held_from.is_some_and(|from| connection >= from)
            || connection < self.abandoned_below
            || self.cut.contains(&connection)
    }
}

/// A [`SilentProxy::cut_after_commit`] waiting to trip: the bytes that pick the connection,
/// and the connection once they were seen.
#[derive(Debug, Default)]
struct CommitTrap {
    needle: Option<Vec<u8>>,
    seen_on: Option<u64>,
}

/// What a client sends to commit: a simple query `COMMIT` (the text and its terminator).
const COMMIT_QUERY: &[u8] = b"COMMIT\0";

/// The trap and how often it tripped, shared by the pumps.
#[derive(Debug, Default)]
struct Traps {
    commit: Mutex<CommitTrap>,
    tripped: AtomicU64,
}

impl Traps {
    /// Whether `chunk`, sent by the client on `connection`, is the commit to cut after.
    fn trips(&self, connection: u64, chunk: &[u8]) -> bool {
        let mut trap = self
            .commit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(needle) = trap.needle.as_deref() else {
            return false;
        };
        if trap.seen_on.is_none() && contains(chunk, needle) {
            trap.seen_on = Some(connection);
        }
        if trap.seen_on != Some(connection) || !contains(chunk, COMMIT_QUERY) {
            return false;
        }
        *trap = CommitTrap::default();
        self.tripped.fetch_add(1, Ordering::SeqCst);
        true
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The proxy; see the module documentation. Stops accepting when dropped (connections already
/// made live on until either side closes).
#[derive(Debug)]
pub struct SilentProxy {
    addr: SocketAddr,
    silence: watch::Sender<Silence>,
    accepted: Arc<AtomicU64>,
    traps: Arc<Traps>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<SilentProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (silence, _) = watch::channel(Silence::default());
        let accepted = Arc::new(AtomicU64::new(0));
        let traps = Arc::new(Traps::default());
        let acceptor = tokio::spawn({
            let (silence, accepted, traps) = (silence.clone(), accepted.clone(), traps.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let connection = accepted.fetch_add(1, Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let from_client = Pump {
                        connection,
                        silence: silence.subscribe(),
                        cut: Some((silence.clone(), traps.clone())),
                    };
                    tokio::spawn(from_client.run(client_read, server_write));
                    let from_server = Pump {
                        connection,
                        silence: silence.subscribe(),
                        cut: None,
                    };
                    tokio::spawn(from_server.run(server_read, client_write));
                }
            }
        });
        Ok(SilentProxy {
            addr,
            silence,
            accepted,
            traps,
            acceptor,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forwards nothing on any connection, old or new, until [`SilentProxy::thaw`].
    pub fn freeze(&self) {
        self.silence.send_modify(|s| s.frozen = true);
    }

    /// Forwards again, what waited first (on the connections held by
    /// [`SilentProxy::hold_new`] too).
    pub fn thaw(&self) {
        self.silence.send_modify(|s| {
            s.frozen = false;
            s.held_from = None;
        });
    }

    /// Leaves the connections accepted so far flowing and holds every new one silent until
    /// [`SilentProxy::thaw`]: a client that reconnects waits for the server's first answer
    /// meanwhile, as it would while the network lets no new flow through.
    pub fn hold_new(&self) {
        let from = self.accepted();
        self.silence.send_modify(|s| s.held_from = Some(from));
    }

    /// Thaws, but leaves every connection accepted so far silent for good.
    pub fn abandon(&self) {
        let below = self.accepted();
        self.silence.send_modify(|s| {
            s.frozen = false;
            s.abandoned_below = below;
        });
    }

    /// Arms the commit trap (see the module documentation): the first connection whose client
    /// sends `needle` has its next `COMMIT` forwarded, then falls silent for good. Trips once;
    /// arming it again waits for the next connection to send `needle`.
    pub fn cut_after_commit(&self, needle: &[u8]) {
        *self
            .traps
            .commit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = CommitTrap {
            needle: Some(needle.to_vec()),
            seen_on: None,
        };
    }

    /// How many commits the trap cut the answer of.
    pub fn commits_cut(&self) -> u64 {
        self.traps.tripped.load(Ordering::SeqCst)
    }

    /// How many connections it has accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// One direction of a connection.
struct Pump {
    connection: u64,
    silence: watch::Receiver<Silence>,
    /// On the client's side: where to cut the connection after a trapped commit.
    cut: Option<(watch::Sender<Silence>, Arc<Traps>)>,
}

impl Pump {
    /// Copies `from` to `to` while the connection is not silenced; while it is, reads nothing
    /// (what was read already waits). Closes `to`'s side when `from` ends.
    async fn run(mut self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf) {
        let connection = self.connection;
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            if self
                .silence
                .wait_for(|s| !s.silences(connection))
                .await
                .is_err()
            {
                return;
            }
            let read = tokio::select! {
                read = from.read(&mut buffer) => read,
                // Silenced while waiting: a cancelled read loses nothing.
                _ = self.silence.wait_for(|s| s.silences(connection)) => continue,
            };
            let n = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A trapped commit: the connection is silenced before the commit is forwarded, so
            // the server's answer cannot slip through to the client.
            if let Some((sender, traps)) = &self.cut
                && traps.trips(connection, &buffer[..n])
            {
                sender.send_modify(|s| {
                    s.cut.insert(connection);
                });
                let _ = to.write_all(&buffer[..n]).await;
                continue;
            }
            if self
                .silence
                .wait_for(|s| !s.silences(connection))
                .await
                .is_err()
            {
                return;
            }
            if to.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    }
}

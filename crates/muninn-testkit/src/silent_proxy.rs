//! A TCP proxy a test can make fall silent: [`SilentProxy`].
//!
//! A database server that stops answering without closing the connection — a network
//! partition, a frozen machine, a firewall that drops the flow — is not something a real server
//! can be asked to do. This proxy sits between a client and the real server and, when
//! [frozen](SilentProxy::freeze), forwards nothing in either direction while keeping every
//! socket open: the client's writes are accepted by its kernel, its reads wait. [Thawing]
//! (SilentProxy::thaw) forwards what waited. [Abandoning](SilentProxy::abandon) leaves the
//! connections open so far silent for good while new ones flow: a flow lost in the network
//! while the server itself is fine, which only a new connection gets past.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which connections are silent: all while frozen, and those numbered below `abandoned_below`
/// for good.
#[derive(Debug, Clone, Copy, Default)]
struct Silence {
    frozen: bool,
    abandoned_below: u64,
}

impl Silence {
    fn silences(&self, connection: u64) -> bool {
        self.frozen || connection < self.abandoned_below
    }
}

/// The proxy; see the module documentation. Stops accepting when dropped (connections already
/// made live on until either side closes).
#[derive(Debug)]
pub struct SilentProxy {
    addr: SocketAddr,
    silence: watch::Sender<Silence>,
    accepted: Arc<AtomicU64>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<SilentProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (silence, _) = watch::channel(Silence::default());
        let accepted = Arc::new(AtomicU64::new(0));
        let acceptor = tokio::spawn({
            let (silence, accepted) = (silence.clone(), accepted.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let connection = accepted.fetch_add(1, Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pump(
                        client_read,
                        server_write,
                        connection,
                        silence.subscribe(),
                    ));
                    tokio::spawn(pump(
                        server_read,
                        client_write,
                        connection,
                        silence.subscribe(),
                    ));
                }
            }
        });
        Ok(SilentProxy {
            addr,
            silence,
            accepted,
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

    /// Forwards again, what waited first.
    pub fn thaw(&self) {
        self.silence.send_modify(|s| s.frozen = false);
    }

    /// Thaws, but leaves every connection accepted so far silent for good.
    pub fn abandon(&self) {
        let below = self.accepted();
        self.silence.send_modify(|s| {
            s.frozen = false;
            s.abandoned_below = below;
        });
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

/// Copies `from` to `to` while the connection is not silenced; while it is, reads nothing
/// (what was read already waits). Closes `to`'s side when `from` ends.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    connection: u64,
    mut silence: watch::Receiver<Silence>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if silence.wait_for(|s| !s.silences(connection)).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // Silenced while waiting: a cancelled read loses nothing.
            _ = silence.wait_for(|s| s.silences(connection)) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if silence.wait_for(|s| !s.silences(connection)).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

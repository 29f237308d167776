//! The sentences of delivery to a local socket, and of the sockets that
//! did not take the packet: none listening, a full buffer or accept queue.

use std::fmt;

use super::Endpoint;

/// [`super::Evidence::SocketConsumed`].
pub(super) fn consumed(f: &mut fmt::Formatter<'_>, func: &str, netns: &str) -> fmt::Result {
    write!(f, "consumed by the socket layer at {func} (netns {netns})")
}

/// [`super::Evidence::ClientHandshake`].
pub(super) fn client_handshake(f: &mut fmt::Formatter<'_>, netns: &str) -> fmt::Result {
    write!(f, "client handshake completed (netns {netns})")
}

/// [`super::Evidence::ServerSocketState`].
pub(super) fn server_state(f: &mut fmt::Formatter<'_>, state: &str, netns: &str) -> fmt::Result {
    write!(f, "server socket reached {state} (netns {netns})")
}

/// [`super::Evidence::SocketRead`].
pub(super) fn read(f: &mut fmt::Formatter<'_>, netns: &str) -> fmt::Result {
    write!(f, "data read by a local socket (netns {netns})")
}

/// [`super::Evidence::SocketQueued`].
pub(super) fn queued(f: &mut fmt::Formatter<'_>, netns: &str) -> fmt::Result {
    write!(f, "queued to a local socket (netns {netns})")
}

/// [`super::Evidence::SocketBufferFull`]; `own` is the socket's
/// `(rx_queue, socket_drops)`.
pub(super) fn buffer_full(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    proto: &str,
    endpoint: &Endpoint,
    dropped: u32,
    delivered: u32,
    own: (Option<u64>, Option<u64>),
) -> fmt::Result {
    write!(
        f,
        "the receive buffer of the {proto} socket {endpoint} in netns {netns} was full: {dropped} packets dropped, {delivered} queued"
    )?;
    if let (Some(q), Some(d)) = own {
        write!(
            f,
            " (its queue holds {q} bytes; the socket has dropped {d} in all)"
        )?;
    }
    Ok(())
}

/// [`super::Evidence::NoListener`].
pub(super) fn no_listener(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    proto: &str,
    endpoint: &Endpoint,
) -> fmt::Result {
    write!(
        f,
        "nothing listens on {proto} {endpoint} in netns {netns}: no {proto} socket on port {} at all",
        endpoint.port
    )
}

/// [`super::Evidence::ListensElsewhere`].
pub(super) fn listens_elsewhere(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    proto: &str,
    endpoint: &Endpoint,
    bound: &[Endpoint],
) -> fmt::Result {
    let b: Vec<String> = bound.iter().map(ToString::to_string).collect();
    write!(
        f,
        "nothing listens on {proto} {endpoint} in netns {netns}: {proto} port {} is bound there on {} only",
        endpoint.port,
        b.join(", ")
    )
}

/// [`super::Evidence::ListenQueueFull`]; `stat` is the namespace's
/// `(overflows, listen_drops)`.
pub(super) fn queue_full(
    f: &mut fmt::Formatter<'_>,
    netns: &str,
    endpoint: &Endpoint,
    waiting: u64,
    backlog: u64,
    syns: u32,
    stat: (Option<u64>, Option<u64>),
) -> fmt::Result {
    write!(
        f,
        "the accept queue of the tcp listener {endpoint} in netns {netns} is full ({waiting} connections waiting to be accepted, backlog {backlog}): {syns} SYNs taken and dropped without an answer"
    )?;
    if let (Some(o), Some(d)) = stat {
        write!(f, " (ListenOverflows {o}, ListenDrops {d})")?;
    }
    Ok(())
}

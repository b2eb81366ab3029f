//! Two tunnel ends over an in-memory transport: streams carry data both ways in order, a slow
//! reader holds back only its own stream, bad frames close only their stream, and keepalive
//! holds a silent connection open while a dead peer is found out. Time is tokio's paused
//! clock, so "blocked" and "an hour of silence" are shown without waiting.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use corral_tunnel::{
    Accepted, Exec, Frame, Keepalive, Kind, Open, Side, Stream, Target, Tunnel, WINDOW,
};
use futures_util::{Sink, Stream as FutStream};
use tokio::sync::mpsc;

type In = Pin<Box<dyn FutStream<Item = Result<Bytes, String>> + Send>>;
type Out = Pin<Box<dyn Sink<Bytes, Error = String> + Send>>;

/// One direction of an in-memory transport.
fn pipe() -> (Out, In, mpsc::UnboundedSender<Bytes>) {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let sink = futures_util::sink::unfold(tx.clone(), |tx, message: Bytes| async move {
        tx.send(message).map_err(|_| "gone".to_string())?;
        Ok::<_, String>(tx)
    });
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|m| (Ok(m), rx)) },
        );
    (Box::pin(sink), Box::pin(stream), tx)
}

fn open_tcp(port: u16) -> Open {
    Open {
        session: "s1".into(),
        target: Target::Tcp { port },
    }
}

/// A manager end and an agent end joined by two pipes.
fn pair() -> (Tunnel, Tunnel, mpsc::UnboundedReceiver<Accepted>) {
    let (to_agent, agent_in, _) = pipe();
    let (to_manager, manager_in, _) = pipe();
    let (manager, _) = Tunnel::start(manager_in, to_agent, Side::Opener, Keepalive::default());
    let (agent, accepted) =
        Tunnel::start(agent_in, to_manager, Side::Acceptor, Keepalive::default());
    (manager, agent, accepted)
}

async fn data(stream: &mut Stream, len: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < len {
        match stream.recv().await {
            Some(Kind::Data(b)) => got.extend_from_slice(&b),
            other => panic!("expected data, got {other:?}"),
        }
    }
    got
}

#[tokio::test(start_paused = true)]
async fn a_stream_carries_its_open_data_eof_and_close_both_ways() {
    let (manager, _agent, mut accepted) = pair();
    let open = Open {
        session: "s1".into(),
        target: Target::Exec(Exec {
            command: vec!["cat".into()],
            tty: true,
            cols: 80,
            rows: 24,
        }),
    };
    let mut ours = manager.open(&open).unwrap();
    let Accepted {
        open: seen,
        stream: mut theirs,
    } = accepted.recv().await.unwrap();
    assert_eq!(seen, open);

    ours.send(Kind::Data(Bytes::from_static(b"hello")))
        .await
        .unwrap();
    ours.send(Kind::Resize {
        cols: 100,
        rows: 40,
    })
    .await
    .unwrap();
    ours.send(Kind::Eof).await.unwrap();
    assert_eq!(data(&mut theirs, 5).await, b"hello");
    assert_eq!(
        theirs.recv().await,
        Some(Kind::Resize {
            cols: 100,
            rows: 40
        })
    );
    assert_eq!(theirs.recv().await, Some(Kind::Eof));

    theirs
        .send(Kind::Stderr(Bytes::from_static(b"oops")))
        .await
        .unwrap();
    theirs.send(Kind::Exit(3)).await.unwrap();
    drop(theirs);
    assert_eq!(
        ours.recv().await,
        Some(Kind::Stderr(Bytes::from_static(b"oops")))
    );
    assert_eq!(ours.recv().await, Some(Kind::Exit(3)));
    assert_eq!(ours.recv().await, Some(Kind::Close(String::new())));
    assert_eq!(ours.recv().await, None);
    assert!(
        ours.send(Kind::Eof).await.is_err(),
        "a closed stream takes nothing"
    );
    assert_eq!(manager.streams(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_large_transfer_arrives_whole_and_in_order() {
    let (manager, _agent, mut accepted) = pair();
    let ours = manager.open(&open_tcp(1)).unwrap();
    let mut theirs = accepted.recv().await.unwrap().stream;
    let payload: Vec<u8> = (0..5 * WINDOW + 12345)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let sent = payload.clone();
    let sender = tokio::spawn(async move {
        ours.send(Kind::Data(Bytes::from(sent))).await.unwrap();
        ours
    });
    assert_eq!(data(&mut theirs, payload.len()).await, payload);
    sender.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_holds_back_its_own_stream_only() {
    let (manager, _agent, mut accepted) = pair();
    let slow = manager.open(&open_tcp(1)).unwrap();
    let mut slow_theirs = accepted.recv().await.unwrap().stream;
    let fast = manager.open(&open_tcp(2)).unwrap();
    let mut fast_theirs = accepted.recv().await.unwrap().stream;

    // The window goes out; the next byte waits for credit the unread side never grants.
    slow.send(Kind::Data(Bytes::from(vec![1u8; WINDOW])))
        .await
        .unwrap();
    let blocked = tokio::time::timeout(
        Duration::from_secs(60),
        slow.send(Kind::Data(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(blocked.is_err(), "sent past the window");

    // Meanwhile the other stream moves several windows.
    let sender = tokio::spawn(async move {
        fast.send(Kind::Data(Bytes::from(vec![2u8; 3 * WINDOW])))
            .await
            .unwrap();
        fast
    });
    assert_eq!(data(&mut fast_theirs, 3 * WINDOW).await.len(), 3 * WINDOW);
    sender.await.unwrap();

    // Once read, the slow stream goes on.
    assert_eq!(data(&mut slow_theirs, WINDOW).await.len(), WINDOW);
    slow.send(Kind::Data(Bytes::from_static(b"x")))
        .await
        .unwrap();
    assert_eq!(data(&mut slow_theirs, 1).await, b"x");
}

/// A raw peer: the test speaks frames to a tunnel end itself.
struct Raw {
    to_tunnel: mpsc::UnboundedSender<Bytes>,
    from_tunnel: In,
}

impl Raw {
    fn send(&self, bytes: Bytes) {
        self.to_tunnel.send(bytes).unwrap();
    }

    async fn next(&mut self) -> Frame {
        use futures_util::StreamExt;
        loop {
            let bytes = self.from_tunnel.next().await.expect("open").unwrap();
            let frame = Frame::decode(bytes).unwrap();
            if !matches!(frame.kind, Kind::Ping(_) | Kind::Pong(_)) {
                return frame;
            }
        }
    }
}

fn raw_acceptor(keepalive: Keepalive) -> (Tunnel, mpsc::UnboundedReceiver<Accepted>, Raw) {
    let (to_raw, from_tunnel, _) = pipe();
    let (_, tunnel_in, to_tunnel) = pipe();
    let (tunnel, accepted) = Tunnel::start(tunnel_in, to_raw, Side::Acceptor, keepalive);
    (
        tunnel,
        accepted,
        Raw {
            to_tunnel,
            from_tunnel,
        },
    )
}

#[tokio::test(start_paused = true)]
async fn a_bad_frame_closes_its_stream_and_nothing_else() {
    let (tunnel, mut accepted, mut raw) = raw_acceptor(Keepalive::default());
    raw.send(Frame::new(1, Kind::Open(open_tcp(1).to_bytes())).encode());
    let mut good = accepted.recv().await.unwrap().stream;

    // An open that is no JSON, an unknown kind, a short frame, data past the credit.
    raw.send(Frame::new(2, Kind::Open(Bytes::from_static(b"{"))).encode());
    let closed = raw.next().await;
    assert_eq!(closed.stream, 2);
    assert!(
        matches!(&closed.kind, Kind::Close(r) if r.contains("a bad open frame")),
        "{closed:?}"
    );

    raw.send(Bytes::from_static(&[0, 0, 0, 1, 99]));
    let closed = raw.next().await;
    assert_eq!(closed.stream, 1);
    assert!(
        matches!(&closed.kind, Kind::Close(r) if r.contains("unknown frame kind 99")),
        "{closed:?}"
    );
    assert!(
        matches!(good.recv().await, Some(Kind::Close(r)) if r.contains("unknown frame kind 99"))
    );

    raw.send(Bytes::from_static(&[0, 0]));
    raw.send(Frame::new(3, Kind::Open(open_tcp(3).to_bytes())).encode());
    let mut third = accepted.recv().await.unwrap().stream;
    raw.send(Frame::new(3, Kind::Data(Bytes::from(vec![0u8; WINDOW]))).encode());
    raw.send(Frame::new(3, Kind::Data(Bytes::from_static(b"!"))).encode());
    assert_eq!(data(&mut third, WINDOW).await.len(), WINDOW);
    assert!(matches!(third.recv().await, Some(Kind::Close(r)) if r.contains("past its credit")));

    // The connection itself is still up, and opens what comes next.
    assert!(!tunnel.is_closed());
    raw.send(Frame::new(4, Kind::Open(open_tcp(4).to_bytes())).encode());
    assert_eq!(accepted.recv().await.unwrap().open, open_tcp(4));
}

#[tokio::test(start_paused = true)]
async fn only_the_opener_opens() {
    let (to_raw, _from_tunnel, _) = pipe();
    let (_, tunnel_in, to_tunnel) = pipe();
    let (manager, _) = Tunnel::start(tunnel_in, to_raw, Side::Opener, Keepalive::default());
    to_tunnel
        .send(Frame::new(9, Kind::Open(open_tcp(1).to_bytes())).encode())
        .unwrap();
    // Refused, and the connection stays.
    let mut stream = manager.open(&open_tcp(2)).unwrap();
    to_tunnel
        .send(Frame::new(stream.id(), Kind::Exit(0)).encode())
        .unwrap();
    assert_eq!(stream.recv().await, Some(Kind::Exit(0)));
    assert_eq!(manager.streams(), 1);
}

#[tokio::test(start_paused = true)]
async fn pings_keep_a_silent_connection_and_a_dead_peer_is_found_out() {
    let (manager, agent, _accepted) = pair();
    let stream = manager.open(&open_tcp(1)).unwrap();
    // A day of silence on the streams: the pings alone keep both ends up.
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert!(!manager.is_closed() && !agent.is_closed());
    assert!(stream.send(Kind::Eof).await.is_ok());

    // A peer that answers nothing is taken as lost after `dead_after`, and its streams end.
    let keepalive = Keepalive::default();
    let (tunnel, _accepted, _raw) = raw_acceptor(keepalive);
    let started = tokio::time::Instant::now();
    tunnel.closed().await;
    assert_eq!(started.elapsed(), keepalive.dead_after);
}

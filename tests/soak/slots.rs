//! The soak's client connections ("slots"): plain RESP sockets, so that a slot can send a
//! `LOCK.ACQUIRE … BLOCK` and be read later, hold `EPHEMERAL` locks bound to its connection,
//! and be closed or killed at a chosen moment.

use std::fmt;
use std::time::{Duration, Instant};

use crate::common::*;

use super::model::{Ms, Span};
use super::{Soak, R};

/// Number of client slots. Waiters occupy a slot until answered; one slot is always kept free
/// for plain commands.
pub const SLOTS: usize = 6;

pub struct Slot {
    pub conn: RawConn,
    /// `CLIENT ID` of the connection.
    pub id: i64,
    /// The key the slot waits for (its `LOCK.ACQUIRE … BLOCK` is not answered yet).
    pub waiting: Option<String>,
}

/// A reply, reduced to what the soak compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Grant(Vec<u8>, i64),
    /// `LOCK.ACQUIREALL`'s `[token, [fence, …]]`.
    Grants(Vec<u8>, Vec<i64>),
    /// `LOCK.OBSERVE`'s `[fence, data]`.
    Observed(i64, Option<Vec<u8>>),
    Nil,
    Int(i64),
    Status(String),
    Bulk(Vec<u8>),
    Err(String),
    Other(String),
}

impl Reply {
    pub fn of(r: Resp) -> Reply {
        match r {
            Resp::Array(items) => match items.as_slice() {
                [Resp::Bulk(token), Resp::Int(fence)] => Reply::Grant(token.clone(), *fence),
                [Resp::Int(fence), Resp::Bulk(data)] => Reply::Observed(*fence, Some(data.clone())),
                [Resp::Int(fence), Resp::Nil] => Reply::Observed(*fence, None),
                [Resp::Bulk(token), Resp::Array(fences)]
                    if fences.iter().all(|f| matches!(f, Resp::Int(_))) =>
                {
                    let fences = fences.iter().map(|f| match f {
                        Resp::Int(i) => *i,
                        _ => 0,
                    });
                    Reply::Grants(token.clone(), fences.collect())
                }
                _ => Reply::Other(format!("{items:?}")),
            },
            Resp::Nil => Reply::Nil,
            Resp::Int(i) => Reply::Int(i),
            Resp::Simple(s) => Reply::Status(lossy(&s)),
            Resp::Bulk(b) => Reply::Bulk(b),
            Resp::Error(e) => Reply::Err(lossy(&e)),
            other => Reply::Other(format!("{other:?}")),
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Grant(t, fence) => write!(f, "[{}, {fence}]", super::model::show(t)),
            Reply::Grants(t, fences) => write!(f, "[{}, {fences:?}]", super::model::show(t)),
            Reply::Observed(fence, None) => write!(f, "[{fence}, nil]"),
            Reply::Observed(fence, Some(d)) => write!(f, "[{fence}, {}]", super::model::show(d)),
            Reply::Nil => f.write_str("nil"),
            Reply::Int(i) => write!(f, "{i}"),
            Reply::Status(s) => f.write_str(s),
            Reply::Bulk(b) => write!(f, "{}", super::model::show(b)),
            Reply::Err(e) => write!(f, "(error) {e}"),
            Reply::Other(o) => write!(f, "(unexpected) {o}"),
        }
    }
}

/// An argument vector as the step log shows it.
pub fn show_argv(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| {
            if a.len() > 24 || a.iter().any(|b| !b.is_ascii_graphic()) {
                super::model::show(a)
            } else {
                lossy(a)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn connect(server: &Server) -> Slot {
    let mut conn = RawConn::connect(server);
    let id = conn.client_id();
    Slot {
        conn,
        id,
        waiting: None,
    }
}

impl Soak {
    /// New connections to the master for every slot (after a restart or failover; the old
    /// ones are closed first).
    pub fn connect_slots(&mut self) {
        for slot in self.slots.drain(..) {
            slot.conn.close();
        }
        self.slots = (0..SLOTS).map(|_| connect(&self.master)).collect();
        self.mc = self.master.conn();
        self.odd = None;
        for i in 0..SLOTS {
            self.note_connected(i);
        }
    }

    pub fn reconnect_slot(&mut self, i: usize) {
        self.slots[i] = connect(&self.master);
        self.note_connected(i);
    }

    fn note_connected(&mut self, i: usize) {
        let local = self.slots[i]
            .conn
            .stream()
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(0);
        let line = format!(
            "  slot {i} connected: client {} from port {local} to port {}",
            self.slots[i].id,
            self.master.port()
        );
        self.note(line);
    }

    /// Sends a command on slot `i` and reads its reply: the reply and the span in which the
    /// server ran it.
    pub fn call(&mut self, i: usize, argv: &[Vec<u8>]) -> R<(Reply, Span)> {
        let t0 = now_ms();
        self.slots[i].conn.send(argv);
        let r = self.read(i)?;
        Ok((r, Span::new(t0, now_ms())))
    }

    /// Reads the next reply of slot `i` (bounded by the connection's read timeout).
    pub fn read(&mut self, i: usize) -> R<Reply> {
        self.slots[i].waiting = None;
        match self.slots[i].conn.read() {
            Ok(r) => Ok(Reply::of(r)),
            Err(e) => {
                let id = self.slots[i].id;
                let local = self.slots[i]
                    .conn
                    .stream()
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                let everywhere: Vec<String> = {
                    let mut found = Vec::new();
                    let mut nodes = vec![&self.master, &self.replica];
                    if let Some(sp) = &self.spare {
                        nodes.push(&sp.master);
                        nodes.push(&sp.replica);
                    }
                    for n in nodes {
                        let all = lossy(&as_bytes(&ok(&mut n.conn(), &rcmd!("CLIENT", "LIST"))));
                        for l in all
                            .lines()
                            .filter(|l| l.contains(&format!("addr={local} ")))
                        {
                            found.push(format!("port {}: {l}", n.port()));
                        }
                    }
                    found
                };
                let client = run(&mut self.mc, &rcmd!("CLIENT", "LIST", "ID", id));
                Err(format!(
                    "slot {i} (client {id}, connected to {:?}; the master is port {}): no reply: \
                     {e}; the master has client {id} as {client:?}; its connection seen from \
                     the servers: {everywhere:?}; INFO redislock:\n{}",
                    self.slots[i].conn.stream().peer_addr(),
                    self.master.port(),
                    self.master.info_text("redislock")
                ))
            }
        }
    }

    /// Whether slot `i` has a reply to read (or its connection closed), without reading it.
    pub fn reply_ready(&self, i: usize) -> bool {
        let stream = self.slots[i].conn.stream();
        stream.set_nonblocking(true).expect("nonblocking");
        let mut b = [0u8; 1];
        let ready =
            !matches!(stream.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).expect("blocking");
        ready
    }

    /// After a `BLOCK` request on slot `i`: waits until the server has either blocked the
    /// client (`None`, and the time by which it had) or answered (`Some`).
    pub fn blocked_or_answered(&mut self, i: usize) -> R<(Option<Reply>, Ms)> {
        let id = self.slots[i].id;
        let deadline = Instant::now() + Duration::from_secs(10) * time_scale();
        loop {
            if self.reply_ready(i) {
                return Ok((Some(self.read(i)?), now_ms()));
            }
            let list = as_bytes(&ok(&mut self.mc, &rcmd!("CLIENT", "LIST", "ID", id)));
            let line = lossy(&list);
            let blocked = line
                .split(' ')
                .any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('b')));
            if blocked {
                return Ok((None, now_ms()));
            }
            if Instant::now() > deadline {
                return Err(format!("client {id} neither blocked nor answered: {line}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Slots not waiting, in order.
    pub fn free_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].waiting.is_none() && !self.observing(i))
            .collect()
    }
}

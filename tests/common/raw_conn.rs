//! Raw RESP connections: a plain TCP socket speaking RESP by hand, with a strict reader.

use std::time::Duration;

use redis::Connection;

use super::*;

/// A reply read by `RawConn`, exactly as it came on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Resp>),
    /// `$-1`, `*-1` or RESP3 `_`.
    Nil,
    /// Anything else RESP3 can send (map, set, double, boolean, verbatim, …), kept as its type
    /// byte and elements.
    Other(u8, Vec<Resp>),
}

/// Held by a test that opens thousands of connections: such tests run one at a time, so that
/// together they stay under this process's open-file limit (the suite runs tests in parallel).
pub fn many_files() -> std::sync::MutexGuard<'static, ()> {
    static MANY_FILES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    MANY_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// A plain TCP connection speaking RESP by hand: send a command and walk away, close the socket
/// while the server is blocked on it, pipeline, or read replies with a strict parser.
pub struct RawConn {
    reader: std::io::BufReader<std::net::TcpStream>,
}

impl RawConn {
    pub fn connect(server: &Server) -> RawConn {
        let stream = std::net::TcpStream::connect(("127.0.0.1", server.port()))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", server.port()));
        stream.set_read_timeout(Some(io_timeout())).unwrap();
        stream.set_write_timeout(Some(io_timeout())).unwrap();
        stream.set_nodelay(true).unwrap();
        RawConn {
            reader: std::io::BufReader::new(stream),
        }
    }

    pub fn stream(&self) -> &std::net::TcpStream {
        self.reader.get_ref()
    }

    /// Sends one command (an array of bulk strings) without reading the reply.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        use std::io::Write;
        self.reader
            .get_mut()
            .write_all(&resp_commands(&[args]))
            .expect("write to server");
    }

    /// Reads one reply; `Err` on a closed connection, a timeout or malformed RESP.
    pub fn read(&mut self) -> Result<Resp, String> {
        read_resp(&mut self.reader, 0)
    }

    /// Sends a command and reads its reply, which must arrive.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Resp {
        self.send(args);
        self.read()
            .unwrap_or_else(|e| panic!("reading the reply: {e}"))
    }

    /// `CLIENT ID` of this connection.
    pub fn client_id(&mut self) -> i64 {
        match self.call(&["CLIENT", "ID"]) {
            Resp::Int(id) => id,
            other => panic!("CLIENT ID answered {other:?}"),
        }
    }

    /// Closes both directions at once.
    pub fn close(self) {
        let _ = self.stream().shutdown(std::net::Shutdown::Both);
    }
}

/// Several commands encoded as RESP arrays of bulk strings, to be sent in one write so that the
/// server reads them in one pass.
pub fn resp_commands<C: AsRef<[A]>, A: AsRef<[u8]>>(commands: &[C]) -> Vec<u8> {
    let mut buf = Vec::new();
    for args in commands {
        let args = args.as_ref();
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            let a = a.as_ref();
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
    }
    buf
}

/// Waits until the server has closed connection `id`, then for two more round trips, so that
/// work it scheduled on the disconnect (in the next event-loop pass) has run.
#[track_caller]
pub fn wait_client_gone(con: &mut Connection, id: i64) {
    wait_until(
        &format!("connection {id} closed"),
        Duration::from_secs(5),
        || as_bytes(&ok(con, &rcmd!("CLIENT", "LIST", "ID", id))).is_empty(),
    );
    ping(con);
    ping(con);
}

pub(crate) fn read_line(r: &mut dyn std::io::BufRead) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("connection closed".into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(format!("line without CRLF: {:?}", lossy(&line)));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

pub(crate) fn parse_len(raw: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad length or integer {:?}", lossy(raw)))
}

/// A strict RESP2/RESP3 reader.
pub fn read_resp(r: &mut dyn std::io::BufRead, depth: usize) -> Result<Resp, String> {
    if depth > 32 {
        return Err("reply nested too deeply".into());
    }
    let line = read_line(r)?;
    let (&kind, rest) = line.split_first().ok_or("empty reply line")?;
    let elements = |r: &mut dyn std::io::BufRead, n: i64| -> Result<Vec<Resp>, String> {
        (0..n).map(|_| read_resp(r, depth + 1)).collect()
    };
    Ok(match kind {
        b'+' => Resp::Simple(rest.to_vec()),
        b'-' => Resp::Error(rest.to_vec()),
        b':' => Resp::Int(parse_len(rest)?),
        b'_' => Resp::Nil,
        b'$' | b'=' | b'!' => {
            let n = parse_len(rest)?;
            if n == -1 && kind == b'$' {
                return Ok(Resp::Nil);
            }
            if n < 0 {
                return Err(format!("negative bulk length {n}"));
            }
            let mut body = vec![0u8; n as usize + 2];
            std::io::Read::read_exact(r, &mut body).map_err(|e| e.to_string())?;
            if !body.ends_with(b"\r\n") {
                return Err("bulk string without CRLF".into());
            }
            body.truncate(n as usize);
            match kind {
                b'$' => Resp::Bulk(body),
                b'!' => Resp::Error(body),
                _ => Resp::Other(kind, vec![Resp::Bulk(body)]),
            }
        }
        b'*' | b'~' | b'>' => {
            let n = parse_len(rest)?;
            if n == -1 && kind == b'*' {
                return Ok(Resp::Nil);
            }
            if n < 0 {
                return Err(format!("negative array length {n}"));
            }
            let items = elements(r, n)?;
            if kind == b'*' {
                Resp::Array(items)
            } else {
                Resp::Other(kind, items)
            }
        }
        b'%' | b'|' => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Err(format!("negative map length {n}"));
            }
            Resp::Other(kind, elements(r, 2 * n)?)
        }
        b',' | b'#' | b'(' => Resp::Other(kind, vec![Resp::Simple(rest.to_vec())]),
        other => return Err(format!("unknown reply type {:?}", other as char)),
    })
}

impl RawConn {
    /// Sends a command and reads its reply; `None` if none arrives within the read timeout.
    pub fn call_or_timeout<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Option<Resp> {
        self.send(args);
        self.read().ok()
    }
}

//! The STOMP 1.2 frame splitter: a byte stream read in chunks, cut into complete frames.
//!
//! Frame boundaries follow stomp.py's own reader exactly (`Transport.__read`), so that the
//! frames passed on to it, concatenated, split into the same frames there: a frame ends at its
//! first NUL, unless a `content-length` header (stomp.py's regex: a line starting
//! `content-length:`, optional whitespace, digits) in the header block before the first blank
//! line (`\n\n` or `\r\n\r\n`) reaches past that NUL, in which case it ends `content-length` bytes
//! after the blank line plus one terminator byte. EOLs (`\n`, `\r\n`) between frames are
//! heart-beats: counted and dropped.
//!
//! A MESSAGE frame goes to the callback only if its header block is well formed (every line
//! `name:value`, uniform line ends, a plain-number `content-length` that the frame honours with a
//! NUL); any other frame is passed through untouched for stomp.py to judge.

use memchr::memchr;
use memchr::memmem::Finder;
use std::sync::LazyLock;

/// What the message callback decided for a MESSAGE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Handled: the frame vanishes.
    Consumed,
    /// Not handled: the frame's bytes go to `out` unchanged.
    Pass,
}

/// A complete, well-formed MESSAGE frame, borrowed from the stream.
#[derive(Debug, Clone, Copy)]
pub struct MessageFrame<'a> {
    /// Raw value of the first `subscription` header.
    pub subscription: Option<&'a [u8]>,
    /// Raw value of the first `destination` header.
    pub destination: Option<&'a [u8]>,
    /// Some header (name or value) holds a '\' (STOMP 1.2 escape): raw values are not final.
    pub escaped: bool,
    /// The body: `content-length` bytes, or up to the NUL.
    pub body: &'a [u8],
}

impl MessageFrame<'_> {
    /// Whether the raw `destination` value holds a STOMP escape (resolve it with
    /// [`Splitter::unescape_header`]). Narrower than `escaped`: ActiveMQ escapes the ':' of
    /// every `message-id` (`ID\chost-...`), so `escaped` is true for all its MESSAGE frames;
    /// both brokers send a topic's ':' as `\c` in `destination`.
    #[cfg(test)]
    pub fn destination_escaped(&self) -> bool {
        self.destination.is_some_and(|d| memchr(b'\\', d).is_some())
    }
}

/// Counters of one [`Splitter::feed`] call.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedStats {
    /// Complete frames seen (heart-beat EOLs not included).
    pub frames: u64,
    /// MESSAGE frames the callback consumed.
    pub consumed: u64,
    /// Heart-beat EOLs dropped.
    pub eols: u64,
}

/// A held buffer larger than this is let go once empty (two reads of the Python reader).
const HELD_KEEP: usize = 512 * 1024;

/// Splits a STOMP byte stream into frames, holding a partial frame between calls.
#[derive(Debug, Default)]
pub struct Splitter {
    /// The start of a frame not yet complete (never starts with an EOL; may be a lone `\r`).
    held: Vec<u8>,
    /// The held frame's full length, once known (it has its NUL and awaits a content-length
    /// body).
    need: Option<usize>,
}

/// Where a complete frame ends.
struct Bounds {
    /// The frame's length including its terminator byte.
    len: usize,
    /// Offset of the first NUL.
    nul: usize,
    /// The blank line ending the header block: (start, end), before the first NUL.
    preamble: Option<(usize, usize)>,
    /// stomp.py's content-length, if its regex matched the header block.
    content_length: Option<usize>,
}

/// The first blank line, as stomp.py's `PREAMBLE_END_RE` (`\n\n|\r\n\r\n`) finds it.
fn preamble_end(f: &[u8]) -> Option<(usize, usize)> {
    // Leftmost of the two: two SIMD searches (precompiled), the second only up to the first's
    // match (a "\r\n\r\n" starting before it may overlap it).
    static LF2: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\n"));
    static CRLF2: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\r\n\r\n"));
    let lf = LF2.find(f);
    let limit = lf.map_or(f.len(), |p| (p + 3).min(f.len()));
    match (lf, CRLF2.find(&f[..limit])) {
        (Some(p), Some(q)) if q < p => Some((q, q + 4)),
        (Some(p), _) => Some((p, p + 2)),
        (None, Some(q)) => Some((q, q + 4)),
        (None, None) => None,
    }
}

/// stomp.py's `^content-length[:]\s*(?P<value>[0-9]+)` (MULTILINE) on the header block: the first
/// line start that matches. Saturates a huge value (such a frame never completes, in stomp.py
/// either).
fn regex_content_length(pre: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"content-length:";
    // One SIMD search for the name (a precompiled searcher), kept only at a line start.
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(NAME));
    for s in FINDER.find_iter(pre) {
        if s > 0 && pre[s - 1] != b'\n' {
            continue;
        }
        let rest = &pre[s + NAME.len()..];
        // Python's bytes `\s`: space, \t, \n, \r, \f, \v.
        let ws = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'\x0b'))
            .count();
        let digits = rest[ws..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            continue;
        }
        let mut v: usize = 0;
        for &d in &rest[ws..ws + digits] {
            v = v.saturating_mul(10).saturating_add(usize::from(d - b'0'));
        }
        return Some(v);
    }
    None
}

/// The bounds of the frame at the start of `f`, or None if it is not complete yet.
fn bounds(f: &[u8]) -> Option<Bounds> {
    let nul = memchr(0, f)?;
    let preamble = preamble_end(&f[..nul]);
    let content_length = preamble.and_then(|(ps, _)| regex_content_length(&f[..ps]));
    let mut len = nul + 1;
    if let (Some((_, pe)), Some(cl)) = (preamble, content_length) {
        let size = pe.saturating_add(cl);
        if size > nul {
            // stomp.py takes the byte at `size` as the terminator without looking at it.
            if size < f.len() {
                len = size + 1;
            } else {
                return None;
            }
        }
    }
    Some(Bounds {
        len,
        nul,
        preamble,
        content_length,
    })
}

/// Each header line of a block whose line ends are `\n` or `\r\n` (the `\r` removed; a
/// stray `\r` elsewhere stays in the line).
#[cfg(test)]
fn header_lines(headers: &[u8]) -> impl Iterator<Item = &[u8]> {
    headers
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// The frame as a well-formed MESSAGE, or None (pass it through).
fn message<'a>(f: &'a [u8], b: &Bounds) -> Option<MessageFrame<'a>> {
    let (ps, pe) = b.preamble?;
    let pre = &f[..ps];
    let (cmd, headers) = match memchr(b'\n', pre) {
        Some(i) => (&pre[..i], &pre[i + 1..]),
        None => (pre, &pre[pre.len()..]),
    };
    let cmd = cmd.strip_suffix(b"\r").unwrap_or(cmd);
    if cmd != b"MESSAGE" {
        return None;
    }
    let mut subscription = None;
    let mut destination = None;
    let mut content_length = None;
    let mut seen_cl = false;
    let mut escaped = false;
    // One scalar pass over the short header lines (cheaper than a memchr per line and per
    // byte looked for). A '\r' not ending a line is refused; that includes the one stomp.py
    // keeps in the last value when the block ends "\r\n\n".
    let n = headers.len();
    let (mut line, mut colon, mut i) = (0, None, 0);
    // An empty block has no line at all.
    while n > 0 && i <= n {
        let c = headers.get(i).copied().unwrap_or(b'\n');
        match c {
            b'\n' => {
                let end = if i > line && headers[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                let colon_at = colon.filter(|&k| k > line)?;
                let (name, value) = (&headers[line..colon_at], &headers[colon_at + 1..end]);
                match name {
                    b"subscription" if subscription.is_none() => subscription = Some(value),
                    b"destination" if destination.is_none() => destination = Some(value),
                    b"content-length" if !seen_cl => {
                        seen_cl = true;
                        if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                            return None;
                        }
                        // The same line stomp.py's regex found first, so the same number.
                        content_length = Some(b.content_length?);
                    }
                    _ => {}
                }
                line = i + 1;
                colon = None;
            }
            b':' if colon.is_none() => colon = Some(i),
            b'\r' if headers.get(i + 1) != Some(&b'\n') => return None,
            b'\\' => escaped = true,
            _ => {}
        }
        i += 1;
    }
    if !seen_cl && b.content_length.is_some() {
        return None; // the regex saw a content-length the lines do not show plainly
    }
    let body = match content_length {
        Some(cl) => {
            // The frame must end exactly there, on a NUL.
            let end = pe.checked_add(cl)?;
            if end + 1 != b.len || f[end] != 0 {
                return None;
            }
            &f[pe..end]
        }
        None => &f[pe..b.nul],
    };
    Some(MessageFrame {
        subscription,
        destination,
        escaped,
        body,
    })
}

/// Split every complete frame at the start of `buf`; returns the bytes used (the rest is an
/// incomplete frame, or empty).
fn run(
    buf: &[u8],
    out: &mut Vec<u8>,
    on_message: &mut impl FnMut(&MessageFrame<'_>) -> Verdict,
    stats: &mut FeedStats,
) -> usize {
    let mut i = 0;
    loop {
        // Heart-beats between frames.
        loop {
            match buf.get(i) {
                Some(b'\n') => i += 1,
                Some(b'\r') if buf.get(i + 1) == Some(&b'\n') => i += 2,
                _ => break,
            }
            stats.eols += 1;
        }
        let f = &buf[i..];
        if f.is_empty() {
            return i;
        }
        let Some(b) = bounds(f) else {
            return i;
        };
        let frame = &f[..b.len];
        stats.frames += 1;
        let verdict = if frame.starts_with(b"MESSAGE") {
            message(frame, &b).map_or(Verdict::Pass, |m| on_message(&m))
        } else {
            Verdict::Pass
        };
        match verdict {
            Verdict::Consumed => stats.consumed += 1,
            Verdict::Pass => out.extend_from_slice(frame),
        }
        i += b.len;
    }
}

impl Splitter {
    pub fn new() -> Splitter {
        Splitter::default()
    }

    /// Split `data` (after any partial frame held from earlier calls) into complete frames, in
    /// order. A MESSAGE frame goes to `on_message`: Consumed frames vanish, Pass frames' bytes
    /// (exactly as received, terminating NUL included) are appended to `out`. Every other
    /// complete frame (CONNECTED, RECEIPT, ERROR, anything unparseable) is appended to `out`
    /// unchanged, in order. EOLs between frames (STOMP heart-beats) are counted and dropped. A
    /// trailing incomplete frame is kept for the next call.
    ///
    /// Only a frame that straddles calls is copied (into the held buffer, up to its end); the
    /// frames complete within `data` are read in place.
    pub fn feed(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        mut on_message: impl FnMut(&MessageFrame<'_>) -> Verdict,
    ) -> FeedStats {
        let mut stats = FeedStats::default();
        let mut pos = 0;
        // Complete the held frame first, taking from `data` only what it can need. Each byte is
        // looked at once while a long frame accumulates: the held bytes are parsed again only
        // when a NUL or the awaited length arrives.
        while !self.held.is_empty() && pos < data.len() {
            let rest = &data[pos..];
            if self.held == b"\r" && rest[0] == b'\n' {
                // A CRLF heart-beat cut in two.
                self.held.clear();
                stats.eols += 1;
                pos += 1;
                break;
            }
            match self.need {
                // A content-length frame waiting for its body: exactly what it lacks.
                Some(total) => {
                    let take = (total - self.held.len()).min(rest.len());
                    self.held.extend_from_slice(&rest[..take]);
                    pos += take;
                    if self.held.len() < total {
                        break;
                    }
                }
                // No NUL yet: up to and including the next one.
                None => match memchr(0, rest) {
                    Some(k) => {
                        self.held.extend_from_slice(&rest[..=k]);
                        pos += k + 1;
                    }
                    None => {
                        self.held.extend_from_slice(rest);
                        pos = data.len();
                        break;
                    }
                },
            }
            // The held frame ends at the end of `held` or later: all of it is used, or none.
            let used = run(&self.held, out, &mut on_message, &mut stats);
            self.held.drain(..used);
            if self.held.is_empty() && self.held.capacity() > HELD_KEEP {
                // One huge frame must not pin its size for the life of the connection.
                self.held = Vec::new();
            }
            self.need = if self.held.is_empty() {
                None
            } else {
                bounds_need(&self.held)
            };
        }
        if pos < data.len() {
            let used = run(&data[pos..], out, &mut on_message, &mut stats);
            self.held.extend_from_slice(&data[pos + used..]);
            self.need = bounds_need(&self.held);
        }
        stats
    }

    /// Bytes held (a partial frame).
    pub fn pending(&self) -> usize {
        self.held.len()
    }

    /// A raw header value with its STOMP 1.2 escapes resolved (`\r`, `\n`, `\c` for ':',
    /// `\\`), appended to `out`; false (and `out` partly written) for any other escape, which
    /// the spec makes a protocol error and stomp.py leaves as it is: pass such a frame.
    pub fn unescape_header(raw: &[u8], out: &mut Vec<u8>) -> bool {
        let mut rest = raw;
        while let Some(k) = memchr(b'\\', rest) {
            out.extend_from_slice(&rest[..k]);
            let c = match rest.get(k + 1) {
                Some(b'r') => b'\r',
                Some(b'n') => b'\n',
                Some(b'c') => b':',
                Some(b'\\') => b'\\',
                _ => return false,
            };
            out.push(c);
            rest = &rest[k + 2..];
        }
        out.extend_from_slice(rest);
        true
    }

    /// A header's raw value (first occurrence) in a raw header block.
    #[cfg(test)]
    pub fn header<'a>(headers: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        if headers.is_empty() {
            return None;
        }
        header_lines(headers).find_map(|line| {
            let colon = memchr(b':', line)?;
            (&line[..colon] == name).then(|| &line[colon + 1..])
        })
    }
}

/// For a held frame that has its first NUL but waits for a content-length body: the total
/// length it needs (frame plus terminator).
fn bounds_need(f: &[u8]) -> Option<usize> {
    let nul = memchr(0, f)?;
    let (ps, pe) = preamble_end(&f[..nul])?;
    let cl = regex_content_length(&f[..ps])?;
    let size = pe.saturating_add(cl);
    (size > nul).then(|| size.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a feed produced: the consumed messages (subscription, destination, body, escaped),
    /// the passed bytes, and the counters.
    type Consumed = (Vec<u8>, Vec<u8>, Vec<u8>, bool);

    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        consumed: Vec<Consumed>,
        out: Vec<u8>,
        stats: FeedStats,
    }

    /// Consume MESSAGEs on subscription "hb", pass the rest.
    fn feed_chunks(chunks: &[&[u8]]) -> (Seen, usize) {
        let mut s = Splitter::new();
        let mut seen = Seen::default();
        for c in chunks {
            let st = s.feed(c, &mut seen.out, |m| {
                if m.subscription == Some(b"hb") {
                    seen.consumed.push((
                        m.subscription.unwrap().to_vec(),
                        m.destination.unwrap_or_default().to_vec(),
                        m.body.to_vec(),
                        m.escaped,
                    ));
                    Verdict::Consumed
                } else {
                    Verdict::Pass
                }
            });
            seen.stats.frames += st.frames;
            seen.stats.consumed += st.consumed;
            seen.stats.eols += st.eols;
        }
        (seen, s.pending())
    }

    const MSG_NUL: &[u8] =
        b"MESSAGE\nsubscription:hb\ndestination:/topic/a\nmessage-id:1\n\n{\"v\":1}\0";
    const MSG_CL: &[u8] =
        b"MESSAGE\r\nsubscription:hb\r\ndestination:/topic/b\r\ncontent-length:5\r\n\r\na\0b\0c\0";
    const MSG_OTHER: &[u8] = b"MESSAGE\nsubscription:other\ndestination:/queue/x\n\nhello\0";
    const MSG_ESC: &[u8] = b"MESSAGE\nsubscription:hb\ndestination:/topic/a\\cb\n\nx\0";
    const RECEIPT: &[u8] = b"RECEIPT\nreceipt-id:77\n\n\0";
    const ERROR: &[u8] = b"ERROR\nmessage:bad\ncontent-length:3\n\nx\0y\0";
    const BAD_CL: &[u8] = b"MESSAGE\nsubscription:hb\ncontent-length:x5\n\nbody\0";
    const NO_COLON: &[u8] = b"MESSAGE\nsubscription:hb\nnocolon\n\nbody\0";

    fn stream() -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(b"CONNECTED\nversion:1.2\nheart-beat:0,1000\n\n\0\n");
        v.extend_from_slice(MSG_NUL);
        v.extend_from_slice(b"\r\n\n");
        v.extend_from_slice(MSG_CL);
        v.extend_from_slice(MSG_OTHER);
        v.extend_from_slice(b"\n");
        v.extend_from_slice(RECEIPT);
        v.extend_from_slice(MSG_ESC);
        v.extend_from_slice(ERROR);
        v.extend_from_slice(b"\r\n");
        v.extend_from_slice(BAD_CL);
        v.extend_from_slice(NO_COLON);
        v.extend_from_slice(MSG_NUL);
        v.extend_from_slice(b"\n\r\n");
        v
    }

    fn expected_out() -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(b"CONNECTED\nversion:1.2\nheart-beat:0,1000\n\n\0");
        v.extend_from_slice(MSG_OTHER);
        v.extend_from_slice(RECEIPT);
        v.extend_from_slice(ERROR);
        v.extend_from_slice(BAD_CL);
        v.extend_from_slice(NO_COLON);
        v
    }

    #[test]
    fn whole_stream() {
        let s = stream();
        let (seen, pending) = feed_chunks(&[&s]);
        assert_eq!(pending, 0);
        assert_eq!(seen.out, expected_out());
        let bodies: Vec<&[u8]> = seen.consumed.iter().map(|c| c.2.as_slice()).collect();
        assert_eq!(
            bodies,
            [&b"{\"v\":1}"[..], b"a\0b\0c", b"x", b"{\"v\":1}"],
            "{seen:?}"
        );
        assert_eq!(seen.consumed[1].1, b"/topic/b");
        assert!(seen.consumed[2].3 && !seen.consumed[0].3);
        assert_eq!(seen.consumed[2].1, b"/topic/a\\cb");
        assert_eq!(
            seen.stats,
            FeedStats {
                frames: 10,
                consumed: 4,
                eols: 7
            }
        );
    }

    #[test]
    fn every_split_point_matches_whole() {
        let s = stream();
        let (whole, _) = feed_chunks(&[&s]);
        for i in 0..=s.len() {
            let (seen, pending) = feed_chunks(&[&s[..i], &s[i..]]);
            assert_eq!(seen, whole, "split at {i}");
            assert_eq!(pending, 0);
        }
    }

    #[test]
    fn every_two_split_points_and_bytewise() {
        let s = stream();
        let (whole, _) = feed_chunks(&[&s]);
        for i in (0..s.len()).step_by(3) {
            for j in i..=s.len() {
                let (seen, _) = feed_chunks(&[&s[..i], &s[i..j], &s[j..]]);
                assert_eq!(seen, whole, "split at {i}, {j}");
            }
        }
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(feed_chunks(&bytes).0, whole);
    }

    #[test]
    fn partial_frame_is_held_then_completed() {
        let mut s = Splitter::new();
        let mut out = Vec::new();
        let st = s.feed(&MSG_CL[..40], &mut out, |_| Verdict::Consumed);
        assert_eq!((st.frames, s.pending()), (0, 40));
        // Split inside the body's NULs and again right before the terminator.
        let n = MSG_CL.len();
        let st = s.feed(&MSG_CL[40..n - 1], &mut out, |_| Verdict::Consumed);
        assert_eq!((st.frames, s.pending()), (0, n - 1));
        let st = s.feed(&MSG_CL[n - 1..], &mut out, |_| Verdict::Consumed);
        assert_eq!((st.frames, st.consumed, s.pending()), (1, 1, 0));
        // A CRLF heart-beat cut between its two bytes.
        assert_eq!(s.feed(b"\r", &mut out, |_| Verdict::Pass).eols, 0);
        assert_eq!(s.pending(), 1);
        assert_eq!(s.feed(b"\n", &mut out, |_| Verdict::Pass).eols, 1);
        assert_eq!(s.pending(), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn large_frames_accumulate_in_small_reads() {
        // A 4 MiB content-length body (NULs inside) and a 4 MiB NUL-terminated one, each read
        // 1 KiB at a time: held once, parsed when complete, not once per read.
        let big: Vec<u8> = (0..4usize << 20).map(|i| (i % 251) as u8).collect();
        let mut stream = format!(
            "MESSAGE\nsubscription:hb\ndestination:/topic/a\ncontent-length:{}\n\n",
            big.len()
        )
        .into_bytes();
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\0\nMESSAGE\nsubscription:hb\n\n");
        stream.extend(std::iter::repeat_n(b'x', 4 << 20));
        stream.extend_from_slice(b"\0");
        let chunks: Vec<&[u8]> = stream.chunks(1024).collect();
        let mut s = Splitter::new();
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        for c in chunks {
            s.feed(c, &mut out, |m| {
                sizes.push(m.body.len());
                Verdict::Consumed
            });
        }
        assert_eq!(sizes, [4 << 20, 4 << 20]);
        assert_eq!((s.pending(), out.len()), (0, 0));
    }

    #[test]
    fn malformed_frames_pass_untouched() {
        for f in [
            // A '\r' left in the last header by "\r\n\n".
            &b"MESSAGE\r\nsubscription:hb\r\n\nbody\0"[..],
            // content-length with spaces (stomp.py's regex takes it, the strict parse does not).
            b"MESSAGE\nsubscription:hb\ncontent-length: 4\n\nbody\0",
            // content-length shorter than the body up to the NUL.
            b"MESSAGE\nsubscription:hb\ncontent-length:2\n\nbody\0",
            // An empty header name.
            b"MESSAGE\nsubscription:hb\n:x\n\nbody\0",
            // No blank line before the NUL.
            b"MESSAGE\nsubscription:hb\0",
            // Not quite MESSAGE.
            b"MESSAGES\nsubscription:hb\n\nbody\0",
        ] {
            let (seen, pending) = feed_chunks(&[f]);
            assert_eq!(
                (seen.out.as_slice(), pending),
                (f, 0),
                "{:?}",
                String::from_utf8_lossy(f)
            );
            assert!(seen.consumed.is_empty());
        }
        // content-length whose terminator byte is not a NUL: stomp.py cuts there anyway; so do
        // we, and pass it.
        let f = b"MESSAGE\nsubscription:hb\ncontent-length:4\n\nab\0cd";
        let (seen, pending) = feed_chunks(&[&f[..]]);
        assert!(seen.consumed.is_empty() && pending == 0);
        assert_eq!(seen.out, &f[..]);
    }

    #[test]
    fn activemq_and_rabbitmq_frames_as_received() {
        // Captured from the brokers on loopback (STOMP 1.2), topic "ingest-probe.eu:1".
        let amq = b"MESSAGE\nexpires:0\ndestination:/topic/ingest-probe.eu\\c1\nsubscription:1\npriority:4\nmessage-id:ID\\cvm-45323-1795516820219-1\\c21\\c-1\\c1\\c1\ncontent-type:text/plain\ntimestamp:1795516961115\n\nhello\x00\n";
        let rmq = b"MESSAGE\nsubscription:1\ndestination:/topic/ingest-probe.eu\\c1\nmessage-id:T_1@@session-QbMd7nUuBp8jM2hih0nAdw@@1\nredelivered:false\ncontent-type:text/plain\ncontent-length:5\n\nhello\x00\n";
        for f in [&amq[..], &rmq[..]] {
            let mut seen = Vec::new();
            let mut out = Vec::new();
            let st = Splitter::new().feed(f, &mut out, |m| {
                let mut dest = Vec::new();
                assert!(Splitter::unescape_header(m.destination.unwrap(), &mut dest));
                seen.push((
                    m.subscription.unwrap().to_vec(),
                    dest,
                    m.body.to_vec(),
                    m.destination_escaped(),
                ));
                Verdict::Consumed
            });
            assert_eq!((st.frames, st.consumed, st.eols), (1, 1, 1));
            assert_eq!(
                seen,
                [(
                    b"1".to_vec(),
                    b"/topic/ingest-probe.eu:1".to_vec(),
                    b"hello".to_vec(),
                    true
                )]
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn header_unescape() {
        let mut out = Vec::new();
        assert!(Splitter::unescape_header(
            b"/topic/svc.eu\\c1\\\\x\\n\\r",
            &mut out
        ));
        assert_eq!(out, b"/topic/svc.eu:1\\x\n\r");
        out.clear();
        assert!(Splitter::unescape_header(b"plain", &mut out));
        assert_eq!(out, b"plain");
        for bad in [&b"a\\t"[..], b"a\\", b"\\C"] {
            assert!(!Splitter::unescape_header(bad, &mut Vec::new()), "{bad:?}");
        }
    }

    #[test]
    fn header_lookup() {
        let h = b"destination:/topic/a\r\nfoo:1\r\nfoo:2\r\nempty:\r\nx:a:b";
        assert_eq!(Splitter::header(h, b"foo"), Some(&b"1"[..]));
        assert_eq!(Splitter::header(h, b"empty"), Some(&b""[..]));
        assert_eq!(Splitter::header(h, b"x"), Some(&b"a:b"[..]));
        assert_eq!(Splitter::header(h, b"destination"), Some(&b"/topic/a"[..]));
        assert_eq!(Splitter::header(h, b"nope"), None);
        assert_eq!(Splitter::header(b"", b"x"), None);
    }

    proptest! {
        #[test]
        fn random_chunkings_match_whole(cuts in proptest::collection::vec(0usize..400, 0..12)) {
            let s = stream();
            let (whole, _) = feed_chunks(&[&s]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (s.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&s[prev..c]);
                prev = c;
            }
            chunks.push(&s[prev..]);
            prop_assert_eq!(feed_chunks(&chunks).0, whole);
        }

        #[test]
        fn preamble_end_is_the_leftmost_match(
            f in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'a')], 0..40)
        ) {
            // The regex's way: at each position, "\n\n" then "\r\n\r\n"; the first position wins.
            let want = (0..f.len()).find_map(|i| {
                if f[i..].starts_with(b"\n\n") {
                    Some((i, i + 2))
                } else if f[i..].starts_with(b"\r\n\r\n") {
                    Some((i, i + 4))
                } else {
                    None
                }
            });
            prop_assert_eq!(preamble_end(&f), want);
        }

        #[test]
        fn regex_content_length_is_the_first_line_that_matches(
            lines in proptest::collection::vec(prop_oneof![
                Just("content-length:12"), Just("content-length: 7"), Just("content-length:x"),
                Just("xcontent-length:5"), Just("content-length:"), Just("a:b"), Just("")], 0..6)
        ) {
            let pre = lines.join("\n").into_bytes();
            // By hand: each line start, the name, Python's \s*, then digits.
            let want = (0..=pre.len())
                .filter(|&i| i == 0 || pre[i - 1] == b'\n')
                .find_map(|i| {
                    let rest = pre[i..].strip_prefix(&b"content-length:"[..])?;
                    let t: Vec<u8> =
                        rest.iter().copied().skip_while(|c| b" \t\n\r\x0b\x0c".contains(c)).collect();
                    let d: String =
                        t.iter().take_while(|c| c.is_ascii_digit()).map(|&c| c as char).collect();
                    d.parse::<usize>().ok()
                });
            prop_assert_eq!(regex_content_length(&pre), want);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_keep_every_byte(
            data in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(b'\n'), Just(b'\r'), Just(b':'), any::<u8>()], 0..300),
            cut in 0usize..300,
        ) {
            // Every byte ends up passed, consumed, dropped as an EOL, or held: passing everything,
            // out + EOL bytes + held == input (lengths), whatever the chunking.
            let cut = cut.min(data.len());
            let mut s = Splitter::new();
            let mut out = Vec::new();
            let a = s.feed(&data[..cut], &mut out, |_| Verdict::Pass);
            let b = s.feed(&data[cut..], &mut out, |_| Verdict::Pass);
            let mut s2 = Splitter::new();
            let mut out2 = Vec::new();
            let w = s2.feed(&data, &mut out2, |_| Verdict::Pass);
            prop_assert_eq!(&out, &out2);
            prop_assert_eq!(a.eols + b.eols, w.eols);
            prop_assert_eq!(s.pending(), s2.pending());
            prop_assert!(out.len() + s.pending() <= data.len());
        }
    }

    /// `cargo test --release --lib split_timing -- --ignored --nocapture`: MESSAGE frames as
    /// ActiveMQ sends them, in 64 KiB reads, each body decoded, per frame.
    #[test]
    #[ignore]
    fn split_timing() {
        use crate::ingest::beat::{Decoded, Decoder};
        let body = br#"{"boot":"3f2c9a1b0d7e4c5f8a6b2d1e0f9c8b7a","period":1.0,"sent":1718000000.25,"seq":123456,"topic":"svc.prices.feed-7","v":1}"#;
        let mut frame = b"MESSAGE\ncontent-length:124\nexpires:0\ndestination:/topic/svc.prices.feed-7\nsubscription:1\npriority:4\nmessage-id:ID:host-41234-1718000000000-3:1:1:1:12345\ntimestamp:1718000000250\n\n".to_vec();
        frame.extend_from_slice(body);
        frame.extend_from_slice(b"\0\n");
        let stream: Vec<u8> = frame
            .iter()
            .copied()
            .cycle()
            .take(frame.len() * 20_000)
            .collect();
        let d = Decoder::new(None, 65536);
        for decode in [false, true] {
            let mut best = f64::INFINITY;
            for _ in 0..10 {
                let mut s = Splitter::new();
                let mut out = Vec::new();
                let mut frames = 0u64;
                let t = std::time::Instant::now();
                for chunk in stream.chunks(65536) {
                    let st = s.feed(chunk, &mut out, |m| {
                        if decode && !matches!(d.decode(m.body, None), Decoded::Beat(_)) {
                            return Verdict::Pass;
                        }
                        Verdict::Consumed
                    });
                    frames += st.consumed;
                }
                assert_eq!(frames, 20_000);
                assert!(out.is_empty());
                best = best.min(t.elapsed().as_nanos() as f64 / frames as f64);
            }
            println!(
                "split{} {best:7.1} ns/frame ({} bytes/frame)",
                if decode { "+decode" } else { "        " },
                frame.len()
            );
        }
    }
}

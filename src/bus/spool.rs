//! The on-disk spool of one bus sink: an append-only file of records, in the
//! order they were sent, and a small head file saying how far the broker has
//! acknowledged them.
//!
//! A record is `len: u32 LE`, `crc32: u32 LE` (of the payload), then the
//! payload: `token: u64 LE`, `topic len: u16 LE`, topic, `key len: u16 LE`,
//! key, then (when the top bit of the topic length is set) `id len: u16 LE`
//! and the message's id, then the body. Records written before messages had
//! ids (top bit clear) read back with an empty id. A crash can leave a torn last record: opening the spool checks
//! every record's length and CRC and cuts the file back to its last whole
//! record (the torn one was never acknowledged to anyone). Appends are
//! fsync'd in batches (every `sync_every` records or `sync_interval`,
//! whichever comes first, and on close). The head file holds the offset of
//! the first record not yet acknowledged; a head lost in a crash only means
//! records are sent again (at least once, never lost).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Message;

/// Bytes before each record's payload.
const HEADER: u64 = 8;

/// CRC-32 (IEEE, reflected), bitwise: records are small and few per second.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// Why the spool could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// `max_bytes` reached: the message was not spooled.
    #[error("spool {0} is full")]
    Full(String),
}

/// A record read back: its token (the order it was sent in) and the message.
#[derive(Debug, Clone)]
pub struct Record {
    pub token: u64,
    pub msg: Arc<Message>,
    /// File offset just past this record.
    pub end: u64,
}

/// One sink's spool file.
pub struct Spool {
    path: PathBuf,
    head_path: PathBuf,
    file: File,
    /// Length of the file (every record whole).
    len: u64,
    /// First record not yet handed back by [`Spool::next_batch`].
    read_at: u64,
    /// First record not yet acknowledged (the head file's value).
    head: u64,
    max_bytes: u64,
    sync_every: u32,
    sync_interval: Duration,
    unsynced: u32,
    last_sync: Instant,
    /// fsyncs done (batching is observable).
    pub syncs: u64,
    /// Bytes of a torn last record cut off when it was opened.
    pub torn_bytes: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.display().to_string(), source }
}

/// The top bit of the topic length: an id follows the key.
const HAS_ID: u16 = 0x8000;

fn encode(token: u64, m: &Message) -> Vec<u8> {
    let topic = &m.topic.as_bytes()[..m.topic.len().min((HAS_ID - 1) as usize)];
    let key = &m.key.as_bytes()[..m.key.len().min(u16::MAX as usize)];
    let id = &m.id.as_bytes()[..m.id.len().min(u16::MAX as usize)];
    let mut p = Vec::with_capacity(14 + topic.len() + key.len() + id.len() + m.body.len() + HEADER as usize);
    p.extend_from_slice(&[0; HEADER as usize]);
    p.extend_from_slice(&token.to_le_bytes());
    p.extend_from_slice(&(topic.len() as u16 | HAS_ID).to_le_bytes());
    p.extend_from_slice(topic);
    p.extend_from_slice(&(key.len() as u16).to_le_bytes());
    p.extend_from_slice(key);
    p.extend_from_slice(&(id.len() as u16).to_le_bytes());
    p.extend_from_slice(id);
    p.extend_from_slice(&m.body);
    let n = (p.len() as u64 - HEADER) as u32;
    let crc = crc32(&p[HEADER as usize..]);
    p[..4].copy_from_slice(&n.to_le_bytes());
    p[4..8].copy_from_slice(&crc.to_le_bytes());
    p
}

fn decode(p: &[u8]) -> Option<(u64, Message)> {
    let token = u64::from_le_bytes(p.get(..8)?.try_into().ok()?);
    let tl = u16::from_le_bytes(p.get(8..10)?.try_into().ok()?);
    let has_id = tl & HAS_ID != 0;
    let tl = (tl & !HAS_ID) as usize;
    let topic = std::str::from_utf8(p.get(10..10 + tl)?).ok()?.to_string();
    let k0 = 10 + tl;
    let kl = u16::from_le_bytes(p.get(k0..k0 + 2)?.try_into().ok()?) as usize;
    let key = std::str::from_utf8(p.get(k0 + 2..k0 + 2 + kl)?).ok()?.to_string();
    let mut b0 = k0 + 2 + kl;
    let mut id = String::new();
    if has_id {
        let il = u16::from_le_bytes(p.get(b0..b0 + 2)?.try_into().ok()?) as usize;
        id = std::str::from_utf8(p.get(b0 + 2..b0 + 2 + il)?).ok()?.to_string();
        b0 += 2 + il;
    }
    let body = p.get(b0..)?.to_vec();
    Some((token, Message { topic, key, body, id }))
}

/// Read the whole record at the reader's position: `None` at the end or at a torn/corrupt record.
fn read_record(r: &mut impl Read, at: u64, len: u64) -> std::io::Result<Option<(u64, Message, u64)>> {
    if at + HEADER > len {
        return Ok(None);
    }
    let mut h = [0u8; HEADER as usize];
    r.read_exact(&mut h)?;
    let n = u32::from_le_bytes(h[..4].try_into().expect("4 bytes")) as u64;
    let crc = u32::from_le_bytes(h[4..].try_into().expect("4 bytes"));
    if at + HEADER + n > len {
        return Ok(None);
    }
    let mut p = vec![0u8; n as usize];
    r.read_exact(&mut p)?;
    if crc32(&p) != crc {
        return Ok(None);
    }
    Ok(decode(&p).map(|(t, m)| (t, m, at + HEADER + n)))
}

impl Spool {
    /// Open (or create) the spool at `path`, checking every record; a torn
    /// last record is cut off. Returns the spool and the records not yet
    /// acknowledged (they are read again by [`Spool::next_batch`], first).
    pub fn open(path: &Path, max_bytes: u64, sync_every: u32, sync_interval: Duration) -> Result<(Spool, Vec<Record>), SpoolError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(path))?;
        }
        let file = OpenOptions::new().create(true).read(true).append(true).open(path).map_err(io(path))?;
        let head_path = path.with_extension("head");
        let file_len = file.metadata().map_err(io(path))?.len();
        let head = std::fs::read(&head_path)
            .ok()
            .and_then(|b| b.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))))
            .unwrap_or(0);
        // Scan every record: the whole ones up to the first torn one count.
        let mut r = std::io::BufReader::new(File::open(path).map_err(io(path))?);
        let (mut at, mut pending) = (0u64, Vec::new());
        while let Some((token, msg, end)) = read_record(&mut r, at, file_len).map_err(io(path))? {
            if at >= head {
                pending.push(Record { token, msg: Arc::new(msg), end });
            }
            at = end;
        }
        let torn_bytes = file_len - at;
        if torn_bytes > 0 {
            file.set_len(at).map_err(io(path))?;
            file.sync_data().map_err(io(path))?;
        }
        // A head beyond the records (the file was cut): everything there is pending.
        let head = if head > at { 0 } else { head };
        let mut s = Spool {
            path: path.to_path_buf(),
            head_path,
            file,
            len: at,
            read_at: head,
            head,
            max_bytes,
            sync_every: sync_every.max(1),
            sync_interval,
            unsynced: 0,
            last_sync: Instant::now(),
            syncs: 0,
            torn_bytes,
        };
        if pending.is_empty() {
            s.reset()?;
        }
        Ok((s, pending))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of records not yet acknowledged.
    pub fn bytes(&self) -> u64 {
        self.len - self.head
    }

    /// Whether records wait to be handed out by [`Spool::next_batch`].
    pub fn has_unread(&self) -> bool {
        self.read_at < self.len
    }

    /// Whether nothing in the file is unacknowledged.
    pub fn is_empty(&self) -> bool {
        self.head >= self.len
    }

    /// Append one message; fsync'd when the batch is full or old enough.
    pub fn append(&mut self, token: u64, m: &Message) -> Result<(), SpoolError> {
        let rec = encode(token, m);
        if self.bytes() + rec.len() as u64 > self.max_bytes {
            return Err(SpoolError::Full(self.path.display().to_string()));
        }
        self.file.write_all(&rec).map_err(io(&self.path))?;
        self.len += rec.len() as u64;
        self.unsynced += 1;
        if self.unsynced >= self.sync_every || self.last_sync.elapsed() >= self.sync_interval {
            self.sync()?;
        }
        Ok(())
    }

    /// fsync what was appended (if anything).
    pub fn sync(&mut self) -> Result<(), SpoolError> {
        if self.unsynced > 0 {
            self.file.sync_data().map_err(io(&self.path))?;
            self.syncs += 1;
            self.unsynced = 0;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// fsync when the oldest unsynced append is older than the interval.
    pub fn sync_if_due(&mut self) -> Result<(), SpoolError> {
        if self.unsynced > 0 && self.last_sync.elapsed() >= self.sync_interval { self.sync() } else { Ok(()) }
    }

    /// Up to `n` next records, read with one open.
    pub fn next_batch(&mut self, n: usize) -> Result<Vec<Record>, SpoolError> {
        let mut out = Vec::new();
        if !self.has_unread() || n == 0 {
            return Ok(out);
        }
        let mut f = File::open(&self.path).map_err(io(&self.path))?;
        f.seek(SeekFrom::Start(self.read_at)).map_err(io(&self.path))?;
        let mut r = std::io::BufReader::new(f);
        while out.len() < n {
            match read_record(&mut r, self.read_at, self.len).map_err(io(&self.path))? {
                Some((token, msg, end)) => {
                    self.read_at = end;
                    out.push(Record { token, msg: Arc::new(msg), end });
                }
                None => {
                    self.read_at = self.len;
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Every record up to `end` is acknowledged: move the head there (and
    /// empty the file once everything in it is).
    pub fn acknowledge(&mut self, end: u64) -> Result<(), SpoolError> {
        if end <= self.head {
            return Ok(());
        }
        self.head = end.min(self.len);
        if self.head >= self.len && !self.has_unread() {
            return self.reset();
        }
        std::fs::write(&self.head_path, self.head.to_le_bytes()).map_err(io(&self.head_path))
    }

    /// Empty the file and the head.
    fn reset(&mut self) -> Result<(), SpoolError> {
        self.file.set_len(0).map_err(io(&self.path))?;
        self.len = 0;
        self.read_at = 0;
        self.head = 0;
        self.unsynced = 0;
        let _ = std::fs::remove_file(&self.head_path);
        Ok(())
    }

    /// Replace the whole spool with `records` (in order): what is still
    /// undelivered at exit. Written beside it, fsync'd, then renamed over it.
    pub fn rewrite(&mut self, records: &[(u64, Arc<Message>)]) -> Result<(), SpoolError> {
        let tmp = self.path.with_extension("tmp");
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        let mut len = 0u64;
        {
            let mut w = std::io::BufWriter::new(&mut f);
            for (t, m) in records {
                let rec = encode(*t, m);
                w.write_all(&rec).map_err(io(&tmp))?;
                len += rec.len() as u64;
            }
            w.flush().map_err(io(&tmp))?;
        }
        f.sync_all().map_err(io(&tmp))?;
        let _ = std::fs::remove_file(&self.head_path);
        std::fs::rename(&tmp, &self.path).map_err(io(&self.path))?;
        if let Some(dir) = self.path.parent().and_then(|d| File::open(d).ok()) {
            let _ = dir.sync_all();
        }
        self.file = OpenOptions::new().read(true).append(true).open(&self.path).map_err(io(&self.path))?;
        self.syncs += 1;
        self.len = len;
        self.read_at = len;
        self.head = 0;
        self.unsynced = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(i: u32) -> Message {
        Message {
            topic: "t".into(),
            key: format!("s{}", i % 2),
            body: format!("{{\"seq\":{i}}}").into_bytes(),
            id: format!("r/s{}/{i}", i % 2),
        }
    }

    fn open(p: &Path) -> (Spool, Vec<Record>) {
        Spool::open(p, 1 << 20, 4, Duration::from_secs(3600)).unwrap()
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn appended_records_replay_in_order_after_reopening() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.spool");
        let (mut s, pending) = open(&p);
        assert!(pending.is_empty());
        for i in 0..10 {
            s.append(100 + i as u64, &msg(i)).unwrap();
        }
        drop(s);
        let (mut s, pending) = open(&p);
        let got: Vec<u64> = pending.iter().map(|r| r.token).collect();
        assert_eq!(got, (100..110).collect::<Vec<_>>());
        assert_eq!(pending[3].msg.body, b"{\"seq\":3}");
        assert_eq!(pending[3].msg.key, "s1");
        assert_eq!(pending[3].msg.id, "r/s1/3", "a message keeps its id in the spool");
        // Acknowledge the first four: a reopen replays the other six.
        let batch = s.next_batch(4).unwrap();
        assert_eq!(batch.iter().map(|r| r.token).collect::<Vec<_>>(), [100, 101, 102, 103]);
        s.acknowledge(batch[3].end).unwrap();
        drop(s);
        let (_, pending) = open(&p);
        assert_eq!(pending.iter().map(|r| r.token).collect::<Vec<_>>(), (104..110).collect::<Vec<_>>());
    }

    #[test]
    fn a_record_written_before_messages_had_ids_reads_back_with_none() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.spool");
        // The earlier layout: token, topic, key, body.
        let mut payload = 5u64.to_le_bytes().to_vec();
        payload.extend_from_slice(&1u16.to_le_bytes());
        payload.extend_from_slice(b"t");
        payload.extend_from_slice(&2u16.to_le_bytes());
        payload.extend_from_slice(b"s0");
        payload.extend_from_slice(b"{}");
        let mut rec = (payload.len() as u32).to_le_bytes().to_vec();
        rec.extend_from_slice(&crc32(&payload).to_le_bytes());
        rec.extend_from_slice(&payload);
        std::fs::write(&p, &rec).unwrap();
        let (_, pending) = open(&p);
        assert_eq!(pending.len(), 1);
        let m = &pending[0].msg;
        assert_eq!((pending[0].token, m.topic.as_str(), m.key.as_str(), &m.body[..], m.id.as_str()), (5, "t", "s0", &b"{}"[..], ""));
    }

    #[test]
    fn a_torn_last_record_is_detected_and_cut_off() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.spool");
        let (mut s, _) = open(&p);
        for i in 0..3 {
            s.append(i as u64, &msg(i)).unwrap();
        }
        drop(s);
        let whole = std::fs::metadata(&p).unwrap().len();
        // A crash in the middle of the fourth write: half of it on disk.
        let half = encode(3, &msg(3));
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&half[..half.len() / 2]).unwrap();
        drop(f);
        let (mut s, pending) = open(&p);
        assert_eq!(pending.iter().map(|r| r.token).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(s.torn_bytes, (half.len() / 2) as u64);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), whole);
        // New records go after the last whole one and read back.
        s.append(9, &msg(9)).unwrap();
        drop(s);
        let (_, pending) = open(&p);
        assert_eq!(pending.iter().map(|r| r.token).collect::<Vec<_>>(), [0, 1, 2, 9]);
    }

    #[test]
    fn a_corrupt_record_ends_the_replay_there() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.spool");
        let (mut s, _) = open(&p);
        for i in 0..3 {
            s.append(i as u64, &msg(i)).unwrap();
        }
        drop(s);
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let (_, pending) = open(&p);
        assert_eq!(pending.iter().map(|r| r.token).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn appends_are_synced_in_batches() {
        let d = tempfile::tempdir().unwrap();
        let (mut s, _) = open(&d.path().join("s.spool"));
        for i in 0..10 {
            s.append(i as u64, &msg(i)).unwrap();
        }
        // sync_every = 4: after 4 and 8 appends, the last two not yet.
        assert_eq!(s.syncs, 2);
        s.sync().unwrap();
        assert_eq!(s.syncs, 3);
        s.sync().unwrap();
        assert_eq!(s.syncs, 3, "nothing new to sync");
        // By time: an interval of zero syncs every append.
        let (mut t, _) = Spool::open(&d.path().join("t.spool"), 1 << 20, 1000, Duration::ZERO).unwrap();
        for i in 0..3 {
            t.append(i as u64, &msg(i)).unwrap();
        }
        assert_eq!(t.syncs, 3);
    }

    #[test]
    fn the_size_bound_refuses_more_until_acknowledged() {
        let d = tempfile::tempdir().unwrap();
        let one = encode(0, &msg(0)).len() as u64;
        let (mut s, _) = Spool::open(&d.path().join("s.spool"), one * 3, 1, Duration::ZERO).unwrap();
        for i in 0..3 {
            s.append(i as u64, &msg(i)).unwrap();
        }
        assert!(matches!(s.append(3, &msg(3)), Err(SpoolError::Full(_))));
        assert_eq!(s.bytes(), one * 3);
        let r = s.next_batch(1).unwrap();
        s.acknowledge(r[0].end).unwrap();
        s.append(3, &msg(3)).unwrap();
        assert_eq!(s.bytes(), one * 3);
    }

    #[test]
    fn a_fully_acknowledged_spool_is_emptied_and_a_rewrite_replaces_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.spool");
        let (mut s, _) = open(&p);
        for i in 0..3 {
            s.append(i as u64, &msg(i)).unwrap();
        }
        let r = s.next_batch(10).unwrap();
        s.acknowledge(r[2].end).unwrap();
        assert!(s.is_empty());
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        s.rewrite(&[(7, Arc::new(msg(7))), (8, Arc::new(msg(8)))]).unwrap();
        drop(s);
        let (_, pending) = open(&p);
        assert_eq!(pending.iter().map(|r| r.token).collect::<Vec<_>>(), [7, 8]);
    }
}

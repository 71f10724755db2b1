//! The store as bytes and back: what the embedded default keeps of its spaces across a restart
//! (`projection/kept.rs` stores them). Expiries are kept as the time left, so an entry expires as late
//! after a restart as it would have without one.

use std::time::Instant;

use super::store::{later, Data, Entries, Entry, SortedSet, Store};

/// The format's first bytes; another version is refused (the spaces are then built from the truth).
const MAGIC: &[u8; 9] = b"strand-1\n";
const TEXT: u8 = 0;
const HASH: u8 = 1;
const SORTED: u8 = 2;

impl Store {
    /// Every live entry at `now` but those whose key starts with one of `leave_out`, as bytes.
    pub(super) fn encode(&self, now: Instant, leave_out: &[String]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        let live = || {
            self.entries.by_space.values().flatten().filter(move |(key, e)| {
                e.expires.is_none_or(|at| at > now) && !leave_out.iter().any(|prefix| key.starts_with(prefix.as_str()))
            })
        };
        put_len(&mut out, live().count());
        for (key, entry) in live() {
            put_bytes(&mut out, key.as_bytes());
            let left = entry.expires.map_or(-1, |at| at.saturating_duration_since(now).as_millis() as i64);
            out.extend_from_slice(&left.to_le_bytes());
            match &entry.data {
                Data::Text(value) => {
                    out.push(TEXT);
                    put_bytes(&mut out, value);
                }
                Data::Hash(fields) => {
                    out.push(HASH);
                    put_len(&mut out, fields.len());
                    for (field, value) in fields {
                        put_bytes(&mut out, field);
                        put_bytes(&mut out, value);
                    }
                }
                Data::Sorted(set) => {
                    out.push(SORTED);
                    put_len(&mut out, set.scores.len());
                    for (member, score) in &set.scores {
                        put_bytes(&mut out, member);
                        out.extend_from_slice(&score.to_le_bytes());
                    }
                }
            }
        }
        out
    }

    /// The store `bytes` hold but the keys starting with one of `leave_out`, its expiries counted from
    /// `now`; why not, when they are not such bytes.
    pub(super) fn decode(bytes: &[u8], now: Instant, leave_out: &[String]) -> Result<Store, String> {
        let mut input = Reader { bytes, at: 0 };
        if input.take(MAGIC.len())? != MAGIC {
            return Err("not a snapshot of this version".to_owned());
        }
        let mut entries = Entries::default();
        for _ in 0..input.len()? {
            let key = String::from_utf8(input.bytes()?.to_vec()).map_err(|_| "a key is not UTF-8")?;
            let left = i64::from_le_bytes(input.array()?);
            let expires = (left >= 0).then(|| later(now, left));
            let data = match input.take(1)?[0] {
                TEXT => Data::Text(input.bytes()?.to_vec()),
                HASH => {
                    // Filled field by field (no room reserved by a count the bytes may lie about).
                    let mut fields = std::collections::HashMap::new();
                    for _ in 0..input.len()? {
                        fields.insert(input.bytes()?.to_vec(), input.bytes()?.to_vec());
                    }
                    Data::Hash(fields)
                }
                SORTED => {
                    let mut set = SortedSet::default();
                    for _ in 0..input.len()? {
                        let member = input.bytes()?.to_vec();
                        set.add(member, f64::from_le_bytes(input.array()?));
                    }
                    Data::Sorted(set)
                }
                other => return Err(format!("an entry of unknown kind {other}")),
            };
            if !leave_out.iter().any(|prefix| key.starts_with(prefix.as_str())) {
                entries.insert(key, Entry { data, expires });
            }
        }
        if input.at != bytes.len() {
            return Err("bytes after the last entry".to_owned());
        }
        let mut store = Store::default();
        store.entries = entries;
        Ok(store)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads what [`put_len`] and [`put_bytes`] wrote, refusing to run past the end.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, count: usize) -> Result<&'b [u8], String> {
        let end =
            self.at.checked_add(count).filter(|end| *end <= self.bytes.len()).ok_or("the snapshot is cut short")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("took exactly N bytes"))
    }

    fn len(&mut self) -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(self.array()?)).map_err(|_| "a length past this machine's".to_owned())
    }

    fn bytes(&mut self) -> Result<&'b [u8], String> {
        let len = self.len()?;
        self.take(len)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn run(store: &mut Store, command: &[&str], now: Instant) -> redis::Value {
        let args: Vec<Vec<u8>> = command.iter().map(|a| a.as_bytes().to_vec()).collect();
        store.command(&args, now).unwrap()
    }

    #[test]
    fn a_store_comes_back_whole_from_its_bytes_with_its_expiries_and_refuses_other_bytes() {
        let now = Instant::now();
        let mut store = Store::default();
        run(&mut store, &["SET", "{t:p@1#3}:v.a", "1", "PX", "60000"], now);
        run(&mut store, &["SET", "gone", "x", "PX", "10"], now);
        run(&mut store, &["HSET", "{t:p@1#3}:h", "f", "v"], now);
        run(&mut store, &["ZADD", "{t:p@1#4}:z", "2", "b"], now);
        run(&mut store, &["ZADD", "{t:p@1#4}:z", "1.5", "a"], now);
        let bytes = store.encode(now + Duration::from_millis(20), &[]);
        let later = now + Duration::from_secs(30);
        let mut back = Store::decode(&bytes, later, &[]).unwrap();
        assert_eq!(run(&mut back, &["GET", "{t:p@1#3}:v.a"], later), redis::Value::BulkString(b"1".to_vec()));
        assert_eq!(run(&mut back, &["GET", "gone"], later), redis::Value::Nil, "expired before it was kept");
        assert_eq!(run(&mut back, &["HGET", "{t:p@1#3}:h", "f"], later), redis::Value::BulkString(b"v".to_vec()));
        let members = run(&mut back, &["ZREVRANGE", "{t:p@1#4}:z", "0", "-1"], later);
        let member = |m: &[u8]| redis::Value::BulkString(m.to_vec());
        assert_eq!(members, redis::Value::Array(vec![member(b"b"), member(b"a")]));
        let after = later + Duration::from_secs(60);
        assert_eq!(run(&mut back, &["GET", "{t:p@1#3}:v.a"], after), redis::Value::Nil, "its time left kept");
        assert!(Store::decode(&bytes[..bytes.len() - 1], now, &[]).is_err());
        assert!(Store::decode(b"junk", now, &[]).is_err());
        let without = |prefix: &str| vec![prefix.to_owned()];
        let mut kept = Store::decode(&store.encode(now, &without("{t:p@1#3}")), later, &[]).unwrap();
        assert_eq!(run(&mut kept, &["GET", "{t:p@1#3}:v.a"], later), redis::Value::Nil, "left out when kept");
        let mut taken = Store::decode(&bytes, later, &without("{t:")).unwrap();
        assert_eq!(run(&mut taken, &["ZCARD", "{t:p@1#4}:z"], later), redis::Value::Int(0), "left out when taken back");
        let mut lying = MAGIC.to_vec();
        lying.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(Store::decode(&lying, now, &[]).is_err(), "a count past the bytes is refused, not allocated");
    }
}

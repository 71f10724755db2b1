//! Redis's data model for the commands the cache's scripts and reads use: strings, hashes and sorted sets
//! with expiry, each command answering as Redis answers (a nil reply, an integer, `WRONGTYPE`) — and none
//! of the cache's own rules, which are the scripts'.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use redis::Value;

use super::number_text;

/// Writes between sweeps of expired entries.
const SWEEP_EVERY: u64 = 16_384;

/// The keys and values, the way Redis keeps them.
#[derive(Default)]
pub(super) struct Store {
    pub(super) entries: Entries,
    writes: u64,
}

/// Every entry, kept apart by the space its key is in (`{tenant:plugin@version` — keys of no space in
/// one group of their own): listing a space touches that space's entries only, never every tenant's.
#[derive(Default)]
pub(super) struct Entries {
    pub(super) by_space: HashMap<String, HashMap<String, Entry>>,
}

impl Entries {
    /// The group of `key`: its space's `{tenant:plugin@version`, or "" for a key outside every space.
    fn group(key: &str) -> &str {
        match key.find('#') {
            Some(end) if key.starts_with('{') => &key[..end],
            _ => "",
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.by_space.get_mut(Self::group(key))?.get_mut(key)
    }

    pub(super) fn insert(&mut self, key: String, entry: Entry) {
        let group = Self::group(&key);
        match self.by_space.get_mut(group) {
            Some(entries) => {
                entries.insert(key, entry);
            }
            None => {
                self.by_space.entry(group.to_owned()).or_default().insert(key, entry);
            }
        }
    }

    fn remove(&mut self, key: &str) -> Option<Entry> {
        let group = Self::group(key);
        let entries = self.by_space.get_mut(group)?;
        let removed = entries.remove(key);
        if entries.is_empty() {
            self.by_space.remove(group);
        }
        removed
    }

    /// Drops the entries that expired by `now`, in every group.
    fn sweep(&mut self, now: Instant) {
        self.by_space.retain(|_, entries| {
            entries.retain(|_, e| e.expires.is_none_or(|at| at > now));
            !entries.is_empty()
        });
    }
}

pub(super) struct Entry {
    pub(super) data: Data,
    pub(super) expires: Option<Instant>,
}

pub(super) enum Data {
    Text(Vec<u8>),
    Hash(HashMap<Vec<u8>, Vec<u8>>),
    Sorted(SortedSet),
}

/// A sorted set ordered like Redis's: by score, then by member.
#[derive(Default)]
pub(super) struct SortedSet {
    pub(super) scores: HashMap<Vec<u8>, f64>,
    pub(super) order: BTreeSet<(Score, Vec<u8>)>,
}

/// A score with a total order (scores are never NaN: plugin output is validated).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Score(pub(super) f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl SortedSet {
    /// Adds or moves `member`; true if it is new.
    pub(super) fn add(&mut self, member: Vec<u8>, score: f64) -> bool {
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            self.order.remove(&(Score(old), member.clone()));
        }
        self.order.insert((Score(score), member));
        old.is_none()
    }

    /// True if `member` was there.
    fn remove(&mut self, member: &[u8]) -> bool {
        let Some((member, old)) = self.scores.remove_entry(member) else { return false };
        self.order.remove(&(Score(old), member));
        true
    }

    /// The members from rank `start` to `stop` (inclusive, Redis's negative ranks counting from the end),
    /// lowest first — or highest first when `descending`.
    fn range(&self, (start, stop): (i64, i64), descending: bool) -> Vec<(Vec<u8>, f64)> {
        let Some((start, stop)) = ranks(self.order.len(), start, stop) else { return Vec::new() };
        let pick = |(score, member): &(Score, Vec<u8>)| (member.clone(), score.0);
        let count = stop - start + 1;
        if descending {
            self.order.iter().rev().skip(start).take(count).map(pick).collect()
        } else {
            self.order.iter().skip(start).take(count).map(pick).collect()
        }
    }

    /// `member`'s rank, highest first.
    fn reverse_rank(&self, member: &[u8]) -> Option<usize> {
        let score = *self.scores.get(member)?;
        Some(self.order.range((Score(score), member.to_vec())..).count() - 1)
    }
}

/// Redis's rank range `start..=stop` over `len` members, negative ranks counting from the end; `None` when
/// empty.
fn ranks(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop.min(len - 1) };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

impl Store {
    /// Runs one command (the subset the cache's scripts and reads use) at `now`; an error is Redis's text.
    pub(super) fn command(&mut self, args: &[Vec<u8>], now: Instant) -> Result<Value, String> {
        let (name, args) = args.split_first().ok_or("an empty command")?;
        let text = |at: usize| -> Result<String, String> {
            args.get(at).map(|a| String::from_utf8_lossy(a).into_owned()).ok_or_else(|| arity(name))
        };
        let int = |at: usize| -> Result<i64, String> {
            text(at)?.parse::<i64>().map_err(|_| "ERR value is not an integer or out of range".to_owned())
        };
        let float = |at: usize| -> Result<f64, String> {
            text(at)?.parse::<f64>().map_err(|_| "ERR value is not a valid float".to_owned())
        };
        let key = |at: usize| -> Result<String, String> { text(at) };
        Ok(match name.to_ascii_uppercase().as_slice() {
            b"PING" => Value::SimpleString("PONG".to_owned()),
            b"GET" => match self.live(&key(0)?, now) {
                Some(Entry { data: Data::Text(value), .. }) => Value::BulkString(value.clone()),
                Some(_) => return Err(WRONGTYPE.to_owned()),
                None => Value::Nil,
            },
            b"MGET" => Value::Array(
                (0..args.len())
                    .map(|at| match self.live(&String::from_utf8_lossy(&args[at]), now) {
                        Some(Entry { data: Data::Text(value), .. }) => Value::BulkString(value.clone()),
                        _ => Value::Nil,
                    })
                    .collect(),
            ),
            b"SET" => {
                let (key, value) = (key(0)?, args.get(1).ok_or_else(|| arity(name))?.clone());
                let mut only_new = false;
                let mut expires = None;
                let mut at = 2;
                while at < args.len() {
                    match args[at].to_ascii_uppercase().as_slice() {
                        b"NX" => only_new = true,
                        b"PX" => {
                            expires = Some(later(now, int(at + 1)?));
                            at += 1;
                        }
                        _ => return Err("ERR syntax error".to_owned()),
                    }
                    at += 1;
                }
                if only_new && self.live(&key, now).is_some() {
                    return Ok(Value::Nil);
                }
                self.put(key, Data::Text(value), expires);
                Value::Okay
            }
            b"INCRBY" => {
                let (key, by) = (key(0)?, int(1)?);
                let (current, expires) = match self.live(&key, now) {
                    Some(Entry { data: Data::Text(value), expires }) => {
                        let current = String::from_utf8_lossy(value).parse::<i64>();
                        (current.map_err(|_| "ERR value is not an integer or out of range".to_owned())?, *expires)
                    }
                    Some(_) => return Err(WRONGTYPE.to_owned()),
                    None => (0, None),
                };
                let total = current.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
                self.put(key, Data::Text(total.to_string().into_bytes()), expires);
                Value::Int(total)
            }
            b"EXISTS" => Value::Int(i64::from(self.live(&key(0)?, now).is_some())),
            b"DEL" => {
                let mut deleted = 0;
                for key in args {
                    let key = String::from_utf8_lossy(key);
                    if self.live(&key, now).is_some() {
                        self.entries.remove(&key);
                        deleted += 1;
                    }
                }
                Value::Int(deleted)
            }
            b"STRLEN" => match self.live(&key(0)?, now) {
                Some(Entry { data: Data::Text(value), .. }) => Value::Int(value.len() as i64),
                Some(_) => return Err(WRONGTYPE.to_owned()),
                None => Value::Int(0),
            },
            b"PEXPIRE" => {
                let at = later(now, int(1)?);
                match self.live(&key(0)?, now) {
                    Some(entry) => {
                        entry.expires = Some(at);
                        Value::Int(1)
                    }
                    None => Value::Int(0),
                }
            }
            b"HGET" => match self.live(&key(0)?, now) {
                Some(Entry { data: Data::Hash(fields), .. }) => fields
                    .get(args.get(1).ok_or_else(|| arity(name))?)
                    .map_or(Value::Nil, |v| Value::BulkString(v.clone())),
                Some(_) => return Err(WRONGTYPE.to_owned()),
                None => Value::Nil,
            },
            b"HMGET" => {
                let fields = match self.live(&key(0)?, now) {
                    Some(Entry { data: Data::Hash(fields), .. }) => Some(&*fields),
                    Some(_) => return Err(WRONGTYPE.to_owned()),
                    None => None,
                };
                let value =
                    |field| fields.and_then(|f| f.get(field)).map_or(Value::Nil, |v| Value::BulkString(v.clone()));
                Value::Array(args[1..].iter().map(value).collect())
            }
            b"HSET" => {
                let (key, assignments) = (key(0)?, &args[1..]);
                if assignments.is_empty() || assignments.len() % 2 != 0 {
                    return Err(arity(name));
                }
                if self.live(&key, now).is_none() {
                    self.put(key.clone(), Data::Hash(HashMap::new()), None);
                }
                let Some(Entry { data: Data::Hash(fields), .. }) = self.live(&key, now) else {
                    return Err(WRONGTYPE.to_owned());
                };
                let new = assignments.chunks(2).filter(|a| fields.insert(a[0].clone(), a[1].clone()).is_none());
                Value::Int(new.count() as i64)
            }
            b"ZADD" => {
                let key = key(0)?;
                if args.len() < 3 || args.len() % 2 == 0 {
                    return Err(arity(name));
                }
                let mut entries = Vec::with_capacity(args.len() / 2);
                for at in (1..args.len()).step_by(2) {
                    entries.push((float(at)?, args[at + 1].clone()));
                }
                if self.live(&key, now).is_none() {
                    self.put(key.clone(), Data::Sorted(SortedSet::default()), None);
                }
                let set = self.sorted(&key, now)?.ok_or(WRONGTYPE)?;
                Value::Int(entries.into_iter().filter(|(score, member)| set.add(member.clone(), *score)).count() as i64)
            }
            b"ZREM" => {
                let key = key(0)?;
                let member = args.get(1).ok_or_else(|| arity(name))?;
                let Some(set) = self.sorted(&key, now)? else { return Ok(Value::Int(0)) };
                let removed = set.remove(member);
                if set.order.is_empty() {
                    self.entries.remove(&key);
                }
                Value::Int(i64::from(removed))
            }
            b"ZREMRANGEBYRANK" => {
                let (key, start, stop) = (key(0)?, int(1)?, int(2)?);
                let Some(set) = self.sorted(&key, now)? else { return Ok(Value::Int(0)) };
                let doomed = set.range((start, stop), false);
                for (member, _) in &doomed {
                    set.remove(member);
                }
                if set.order.is_empty() {
                    self.entries.remove(&key);
                }
                Value::Int(doomed.len() as i64)
            }
            b"ZCARD" => Value::Int(self.sorted(&key(0)?, now)?.map_or(0, |set| set.order.len() as i64)),
            b"ZSCORE" => {
                let member = args.get(1).ok_or_else(|| arity(name))?;
                match self.sorted(&key(0)?, now)?.and_then(|set| set.scores.get(member).copied()) {
                    Some(score) => Value::BulkString(score_text(score)),
                    None => Value::Nil,
                }
            }
            b"ZMSCORE" => {
                let set = self.sorted(&key(0)?, now)?;
                let score = |member| set.as_ref().and_then(|s| s.scores.get(member).copied());
                Value::Array(
                    args[1..]
                        .iter()
                        .map(|m| score(m).map_or(Value::Nil, |s| Value::BulkString(score_text(s))))
                        .collect(),
                )
            }
            b"ZREVRANK" => {
                let member = args.get(1).ok_or_else(|| arity(name))?;
                match self.sorted(&key(0)?, now)?.and_then(|set| set.reverse_rank(member)) {
                    Some(rank) => Value::Int(rank as i64),
                    None => Value::Nil,
                }
            }
            b"ZREVRANGE" => {
                let (key, start, stop) = (key(0)?, int(1)?, int(2)?);
                let scores = args.get(3).is_some_and(|flag| flag.eq_ignore_ascii_case(b"WITHSCORES"));
                let entries = self.sorted(&key, now)?.map_or_else(Vec::new, |set| set.range((start, stop), true));
                Value::Array(
                    entries
                        .into_iter()
                        .flat_map(|(member, score)| {
                            let score = scores.then(|| Value::BulkString(score_text(score)));
                            std::iter::once(Value::BulkString(member)).chain(score)
                        })
                        .collect(),
                )
            }
            _ => return Err(format!("ERR unknown command '{}'", String::from_utf8_lossy(name))),
        })
    }

    /// The live entry at `key`, dropping it if it expired.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(key)?;
        if entry.expires.is_some_and(|at| at <= now) {
            self.entries.remove(key);
            return None;
        }
        self.entries.get_mut(key)
    }

    /// The sorted set at `key`, if one is there; another kind of data there is Redis's WRONGTYPE.
    pub(super) fn sorted(&mut self, key: &str, now: Instant) -> Result<Option<&mut SortedSet>, String> {
        match self.live(key, now) {
            Some(Entry { data: Data::Sorted(set), .. }) => Ok(Some(set)),
            Some(_) => Err(WRONGTYPE.to_owned()),
            None => Ok(None),
        }
    }

    fn put(&mut self, key: String, data: Data, expires: Option<Instant>) {
        self.entries.insert(key, Entry { data, expires });
        self.writes += 1;
        if self.writes % SWEEP_EVERY == 0 {
            self.entries.sweep(Instant::now());
        }
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn arity(name: &[u8]) -> String {
    format!("ERR wrong number of arguments for '{}' command", String::from_utf8_lossy(name).to_lowercase())
}

/// `ms` milliseconds after `now`; a later instant than this process can name never comes.
pub(super) fn later(now: Instant, ms: i64) -> Instant {
    now.checked_add(Duration::from_millis(ms.max(0) as u64)).unwrap_or(now + Duration::from_secs(100 * 365 * 86_400))
}

/// A sorted-set score as Redis replies it.
fn score_text(score: f64) -> Vec<u8> {
    number_text(score).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(store: &mut Store, command: &[&str]) -> Result<Value, String> {
        let args: Vec<Vec<u8>> = command.iter().map(|a| a.as_bytes().to_vec()).collect();
        store.command(&args, Instant::now())
    }

    #[test]
    fn sorted_sets_rank_and_trim_as_redis_does() {
        let mut store = Store::default();
        for (score, member) in [("1", "a"), ("3", "c"), ("2", "b"), ("2", "bb")] {
            run(&mut store, &["ZADD", "z", score, member]).unwrap();
        }
        let members = |store: &mut Store| match run(store, &["ZREVRANGE", "z", "0", "-1"]).unwrap() {
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::BulkString(b) => String::from_utf8(b).unwrap(),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(members(&mut store), ["c", "bb", "b", "a"], "by score, then member, highest first");
        assert_eq!(run(&mut store, &["ZREVRANK", "z", "bb"]).unwrap(), Value::Int(1));
        assert_eq!(run(&mut store, &["ZREMRANGEBYRANK", "z", "0", "-3"]).unwrap(), Value::Int(2), "keeps the top 2");
        assert_eq!(members(&mut store), ["c", "bb"]);
        assert_eq!(run(&mut store, &["ZREM", "z", "c"]).unwrap(), Value::Int(1));
        assert_eq!(run(&mut store, &["ZREM", "z", "bb"]).unwrap(), Value::Int(1));
        assert_eq!(run(&mut store, &["EXISTS", "z"]).unwrap(), Value::Int(0), "an emptied set is gone");
    }

    #[test]
    fn strings_expire_and_refuse_another_kind() {
        let mut store = Store::default();
        assert_eq!(run(&mut store, &["SET", "m", "1", "NX", "PX", "60000"]).unwrap(), Value::Okay);
        assert_eq!(run(&mut store, &["SET", "m", "2", "NX", "PX", "60000"]).unwrap(), Value::Nil);
        assert_eq!(run(&mut store, &["INCRBY", "n", "-5"]).unwrap(), Value::Int(-5));
        run(&mut store, &["PEXPIRE", "n", "0"]).unwrap();
        assert_eq!(run(&mut store, &["GET", "n"]).unwrap(), Value::Nil, "expired");
        run(&mut store, &["ZADD", "z", "1", "a"]).unwrap();
        assert!(run(&mut store, &["GET", "z"]).unwrap_err().starts_with("WRONGTYPE"));
    }
}

//! The cache in this process, for the embedded default: Redis's data model for the commands the cache's
//! scripts use, and an embedded Lua (5.1, as Redis's) that runs those scripts as they are (`script.rs`).
//! What a batch does is decided by the script alone; this file only keeps strings, hashes and sorted sets
//! the way Redis keeps them. One lock holds the store while a script or command runs: a script is one atomic
//! step, as in Redis. Expired entries are dropped when read and swept now and then.

mod snapshot;
mod store;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use mlua::{Lua, LuaOptions, StdLib};
use redis::Value;

use self::store::{Score, Store};
use super::script::CacheScript;
use super::{CacheError, Quota, Space};

/// Derived data held by this process.
pub struct MemoryCache {
    engine: Mutex<Engine>,
    quota: Quota,
}

impl Default for MemoryCache {
    fn default() -> Self {
        Self::new(Quota::default())
    }
}

/// The Lua state that runs the scripts, holding the store as its app data (`redis.call` reaches it there),
/// and each script compiled once.
struct Engine {
    lua: Lua,
    compiled: HashMap<&'static str, mlua::Function>,
}

impl MemoryCache {
    /// An empty cache holding deployed projectors' spaces to `quota`.
    pub fn new(quota: Quota) -> Self {
        let engine = Engine::new().expect("the embedded Lua starts with the cache's own functions");
        Self { engine: Mutex::new(engine), quota }
    }

    pub(super) fn quota(&self) -> Quota {
        self.quota
    }

    /// Runs `script` on `keys` and `args`, as Redis's `EVALSHA`.
    pub(super) fn eval<'a>(
        &self,
        script: &CacheScript,
        keys: &[String],
        args: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Value, CacheError> {
        let mut engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        engine.eval(script, keys, args).map_err(CacheError::MemoryScript)
    }

    /// Runs one command, as Redis would.
    pub(super) fn query(&self, command: &redis::Cmd) -> Result<Value, CacheError> {
        let args: Vec<Vec<u8>> = command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                // The cache sends no cursors (it scans with `space_keys`).
                _ => b"0".to_vec(),
            })
            .collect();
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        let mut store = engine.store();
        store.command(&args, Instant::now()).map_err(CacheError::Memory)
    }

    /// Up to `count` members of the sorted set `key` strictly after `(score, member)`, highest first: what
    /// the `AFTER` script finds by rank in Redis, here a walk of the set's order from the cursor.
    pub(super) fn after(&self, key: &str, (score, member): (f64, &str), count: usize) -> Vec<(String, f64)> {
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        let mut store = engine.store();
        let Ok(Some(set)) = store.sorted(key, Instant::now()) else { return Vec::new() };
        let cursor = (Score(score), member.as_bytes().to_vec());
        set.order
            .range(..cursor)
            .rev()
            .take(count)
            .map(|(score, member)| (String::from_utf8_lossy(member).into_owned(), score.0))
            .collect()
    }

    /// Every space but the keys starting with one of `leave_out`, as bytes to keep across a restart
    /// ([`MemoryCache::restore`]). The store is locked while it is copied: the scripts wait meanwhile.
    pub fn snapshot(&self, leave_out: &[String]) -> Vec<u8> {
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        let store = engine.store();
        store.encode(Instant::now(), leave_out)
    }

    /// Takes back the spaces of a [`MemoryCache::snapshot`] but the keys starting with one of `leave_out`,
    /// in place of what this cache holds; why not, when `bytes` are not such a snapshot (the cache is then
    /// left as it was).
    pub fn restore(&self, bytes: &[u8], leave_out: &[String]) -> Result<(), CacheError> {
        let restored = Store::decode(bytes, Instant::now(), leave_out).map_err(CacheError::Memory)?;
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        *engine.store() = restored;
        Ok(())
    }

    /// Every key of `space` (data and bookkeeping).
    pub(super) fn space_keys(&self, space: Space<'_>) -> Vec<String> {
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        let store = engine.store();
        store
            .entries
            .by_space
            .get(&format!("{{{space}"))
            .map_or_else(Vec::new, |entries| entries.keys().filter(|key| space.holds(key)).cloned().collect())
    }
}

impl Engine {
    fn new() -> mlua::Result<Self> {
        // Redis's scripts see the base library, `string`, `table` and `math`; so do these.
        let lua = Lua::new_with(StdLib::STRING | StdLib::TABLE | StdLib::MATH, LuaOptions::default())?;
        lua.set_app_data(Store::default());
        let redis = lua.create_table()?;
        redis.set(
            "call",
            lua.create_function(|lua, args: mlua::MultiValue| {
                let args = args.iter().map(command_arg).collect::<mlua::Result<Vec<_>>>()?;
                let reply = {
                    let mut store = lua.app_data_mut::<Store>().ok_or_else(|| mlua::Error::runtime("no store"))?;
                    store.command(&args, Instant::now()).map_err(mlua::Error::runtime)?
                };
                to_lua(lua, reply)
            })?,
        )?;
        redis.set(
            "error_reply",
            lua.create_function(|lua, message: mlua::LuaString| {
                let reply = lua.create_table()?;
                reply.set("err", message)?;
                Ok(reply)
            })?,
        )?;
        lua.globals().set("redis", redis)?;
        Ok(Self { lua, compiled: HashMap::new() })
    }

    fn store(&self) -> mlua::AppDataRefMut<'_, Store> {
        self.lua.app_data_mut::<Store>().expect("the store is the Lua state's app data from its start")
    }

    fn eval<'a>(
        &mut self,
        script: &CacheScript,
        keys: &[String],
        args: impl IntoIterator<Item = &'a [u8]>,
    ) -> mlua::Result<Value> {
        let function = match self.compiled.get(script.source) {
            Some(function) => function.clone(),
            None => {
                let function = self.lua.load(script.source).into_function()?;
                self.compiled.insert(script.source, function.clone());
                function
            }
        };
        let globals = self.lua.globals();
        globals.set("KEYS", self.lua.create_sequence_from(keys.iter().map(String::as_str))?)?;
        let argv = args.into_iter().map(|arg| self.lua.create_string(arg)).collect::<mlua::Result<Vec<_>>>()?;
        globals.set("ARGV", self.lua.create_sequence_from(argv)?)?;
        from_lua(function.call::<mlua::Value>(())?)
    }
}

/// A command's argument as Redis takes it from a script: a string, or a number written as Redis writes it.
fn command_arg(value: &mlua::Value) -> mlua::Result<Vec<u8>> {
    match value {
        mlua::Value::String(text) => Ok(text.as_bytes().to_vec()),
        mlua::Value::Integer(n) => Ok(n.to_string().into_bytes()),
        mlua::Value::Number(n) => Ok(number_text(*n).into_bytes()),
        other => Err(mlua::Error::runtime(format!(
            "Lua redis lib command arguments must be strings or integers, not {}",
            other.type_name()
        ))),
    }
}

/// A reply as Redis hands it to a script: a nil reply is `false`, a status a table with `ok`.
fn to_lua(lua: &Lua, reply: Value) -> mlua::Result<mlua::Value> {
    Ok(match reply {
        Value::Nil => mlua::Value::Boolean(false),
        Value::Int(n) => mlua::Value::Number(n as f64),
        Value::BulkString(bytes) => mlua::Value::String(lua.create_string(bytes)?),
        Value::Okay => {
            let status = lua.create_table()?;
            status.set("ok", "OK")?;
            mlua::Value::Table(status)
        }
        Value::Array(items) => {
            let items = items.into_iter().map(|item| to_lua(lua, item)).collect::<mlua::Result<Vec<_>>>()?;
            mlua::Value::Table(lua.create_sequence_from(items)?)
        }
        other => return Err(mlua::Error::runtime(format!("no script form for the reply {other:?}"))),
    })
}

/// A script's result as Redis returns it: numbers truncated to integers, a table with `err` an error, one
/// with `ok` a status, any other table an array up to its first nil.
fn from_lua(value: mlua::Value) -> mlua::Result<Value> {
    Ok(match value {
        mlua::Value::Nil | mlua::Value::Boolean(false) => Value::Nil,
        mlua::Value::Boolean(true) => Value::Int(1),
        mlua::Value::Integer(n) => Value::Int(n),
        mlua::Value::Number(n) => Value::Int(n as i64),
        mlua::Value::String(text) => Value::BulkString(text.as_bytes().to_vec()),
        mlua::Value::Table(table) => {
            if let Some(error) = table.get::<Option<mlua::LuaString>>("err")? {
                return Err(mlua::Error::runtime(error.to_string_lossy()));
            }
            if table.get::<Option<mlua::LuaString>>("ok")?.is_some() {
                return Ok(Value::Okay);
            }
            let mut items = Vec::new();
            for item in table.sequence_values::<mlua::Value>() {
                items.push(from_lua(item?)?);
            }
            Value::Array(items)
        }
        other => return Err(mlua::Error::runtime(format!("a script returned a {}", other.type_name()))),
    })
}

/// A number as Redis's Lua writes it into a command (`%.17g`): integers without a fraction.
pub(super) fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        (n as i64).to_string()
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_sees_redis_replies_and_returns_as_redis_does() {
        let mut engine = Engine::new().unwrap();
        let script = CacheScript::new(
            "redis.call('SET', KEYS[1], ARGV[1]); \
             return {redis.call('GET', KEYS[1]), redis.call('GET', 'missing') == false, redis.call('INCRBY', 'n', 2.0), 7.9}",
        );
        let reply = engine.eval(&script, &["k".to_owned()], [b"v".as_slice()]).unwrap();
        assert_eq!(
            reply,
            Value::Array(vec![Value::BulkString(b"v".to_vec()), Value::Int(1), Value::Int(2), Value::Int(7)])
        );
        let failing = CacheScript::new("return redis.error_reply('no such effect')");
        assert!(engine.eval(&failing, &[], []).unwrap_err().to_string().contains("no such effect"));
    }
}

//! Compiled components kept on disk by their sha256 and the engine's compatibility hash, so a restart
//! loads what it compiled before instead of compiling every tenant's versions again.

use std::fs;
use std::io;
use std::path::PathBuf;

use wasmtime::component::Component;

use super::super::error::PluginError;
use super::PluginRuntime;
use crate::util::hashing::hex_sha256;

impl PluginRuntime {
    pub(super) fn compile(&self, wasm: &[u8]) -> Result<Component, PluginError> {
        let not_a_component = |e: wasmtime::Error| PluginError::NotAComponent(format!("{e:#}"));
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, wasm).map_err(not_a_component);
        };
        let path = dir.join(format!("{}-{}.cwasm", hex_sha256(wasm), self.engine_hash));
        if path.exists() {
            // SAFETY: the cache directory holds only what `serialize` below wrote for this engine build
            // (the file name carries the engine's compatibility hash, and wasmtime re-checks it).
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(component) => return Ok(component),
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "unusable compiled plugin; recompiling"),
            }
        }
        let component = Component::new(&self.engine, wasm).map_err(not_a_component)?;
        if let Err(e) = self.store_compiled(&component, dir, &path) {
            // The cache only saves start-up time: a failure to write it is reported, not fatal.
            tracing::warn!(path = %path.display(), error = %e, "cannot cache compiled plugin");
        }
        Ok(component)
    }

    pub(super) fn store_compiled(&self, component: &Component, dir: &PathBuf, path: &PathBuf) -> io::Result<()> {
        let bytes = component.serialize().map_err(|e| io::Error::other(format!("{e:#}")))?;
        fs::create_dir_all(dir)?;
        let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
        fs::write(&temporary, bytes)?;
        fs::rename(&temporary, path)
    }
}

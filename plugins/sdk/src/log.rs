//! Telling the plugin's author what it did: `log::warn("unexpected pair")` in a plugin becomes a line the
//! host names with the tenant, plugin, version and the input being handled (the SDK knows which), keeps
//! within a rate, and shows in `strand plugin logs` and the admin page. In native unit tests lines go to
//! stderr.

use std::cell::Cell;

use crate::Level;

thread_local! {
    static INPUT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Runs `work` with log lines naming input `index` of the call's batch.
pub(crate) fn about<R>(index: u32, work: impl FnOnce() -> R) -> R {
    INPUT.with(|input| input.set(Some(index)));
    let result = work();
    INPUT.with(|input| input.set(None));
    result
}

pub fn debug(message: &str) {
    write(Level::Debug, message);
}

pub fn info(message: &str) {
    write(Level::Info, message);
}

pub fn warn(message: &str) {
    write(Level::Warn, message);
}

pub fn error(message: &str) {
    write(Level::Error, message);
}

fn write(level: Level, message: &str) {
    let input = INPUT.with(Cell::get);
    #[cfg(target_arch = "wasm32")]
    crate::bindings::rate_limiter::strand::plugin::log::log(level, input, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level:?} (input {input:?}): {message}");
}

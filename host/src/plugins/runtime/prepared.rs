//! A component compiled and type-checked against its kind's world — of the current package or the one
//! before —, ready to instantiate per call.

use super::super::bindings::v0_1;
use super::super::bindings::{projector::ProjectorPre, rate_limiter::RateLimiterPre, router::RouterPre};
use super::super::PluginKind;
use super::PluginState;

/// A component checked against its kind's world, ready to instantiate.
#[derive(Clone)]
pub enum PreparedPlugin {
    RateLimiter(Built<RateLimiterPre<PluginState>, v0_1::rate_limiter::RateLimiterPre<PluginState>>),
    Router(Built<RouterPre<PluginState>, v0_1::router::RouterPre<PluginState>>),
    Projector(Built<ProjectorPre<PluginState>, v0_1::projector::ProjectorPre<PluginState>>),
}

/// Which package a component was built against: the host runs both.
#[derive(Clone)]
pub enum Built<Current, V0_1> {
    /// `strand:plugin@0.2.0`.
    Current(Current),
    /// `strand:plugin@0.1.0`, as deployed before 0.2.0.
    V0_1(V0_1),
}

impl<C, O> Built<C, O> {
    fn wit(&self) -> &'static str {
        match self {
            Built::Current(_) => "0.2.0",
            Built::V0_1(_) => "0.1.0",
        }
    }
}

impl PreparedPlugin {
    pub fn kind(&self) -> PluginKind {
        match self {
            PreparedPlugin::RateLimiter(_) => PluginKind::RateLimiter,
            PreparedPlugin::Router(_) => PluginKind::Router,
            PreparedPlugin::Projector(_) => PluginKind::Projector,
        }
    }

    /// The version of the `strand:plugin` package the component was built against.
    pub fn wit_version(&self) -> &'static str {
        match self {
            PreparedPlugin::RateLimiter(built) => built.wit(),
            PreparedPlugin::Router(built) => built.wit(),
            PreparedPlugin::Projector(built) => built.wit(),
        }
    }
}

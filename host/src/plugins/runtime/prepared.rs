//! A component compiled and type-checked against its kind's world — of the current package or one
//! before it —, ready to instantiate per call.

use super::super::bindings::relation_policy::RelationPolicyPre;
use super::super::bindings::relation_projector::RelationProjectorPre;
use super::super::bindings::{projector::ProjectorPre, rate_limiter::RateLimiterPre, router::RouterPre};
use super::super::bindings::{v0_1, v0_2, v0_3};
use super::super::{PluginKind, RelationEvent};
use super::PluginState;

/// A component checked against its kind's world, ready to instantiate.
#[derive(Clone)]
pub enum PreparedPlugin {
    RateLimiter(
        Built<
            RateLimiterPre<PluginState>,
            v0_3::rate_limiter::RateLimiterPre<PluginState>,
            v0_2::rate_limiter::RateLimiterPre<PluginState>,
            v0_1::rate_limiter::RateLimiterPre<PluginState>,
        >,
    ),
    Router(
        Built<
            RouterPre<PluginState>,
            v0_3::router::RouterPre<PluginState>,
            v0_2::router::RouterPre<PluginState>,
            v0_1::router::RouterPre<PluginState>,
        >,
    ),
    Projector(
        Built<
            ProjectorPre<PluginState>,
            v0_3::projector::ProjectorPre<PluginState>,
            v0_2::projector::ProjectorPre<PluginState>,
            v0_1::projector::ProjectorPre<PluginState>,
        >,
    ),
    /// A projector receiving every kind of relation change; new in 0.3.0.
    RelationProjector(
        Since0_3<RelationProjectorPre<PluginState>, v0_3::relation_projector::RelationProjectorPre<PluginState>>,
    ),
    /// New in 0.3.0: no older package has it.
    RelationPolicy(Since0_3<RelationPolicyPre<PluginState>, v0_3::relation_policy::RelationPolicyPre<PluginState>>),
}

/// Which package a component was built against: the host runs all four.
#[derive(Clone)]
pub enum Built<Current, V0_3, V0_2, V0_1> {
    /// `strand:plugin@0.4.0`.
    Current(Current),
    /// `strand:plugin@0.3.0`, as deployed before 0.4.0 (today's records but the write request; its own
    /// package name).
    V0_3(V0_3),
    /// `strand:plugin@0.2.0`, as deployed before 0.3.0 (the same records as 0.3.0).
    V0_2(V0_2),
    /// `strand:plugin@0.1.0`, as deployed before 0.2.0.
    V0_1(V0_1),
}

/// Which package a world new in 0.3.0 was built against.
#[derive(Clone)]
pub enum Since0_3<Current, V0_3> {
    /// `strand:plugin@0.4.0`.
    Current(Current),
    /// `strand:plugin@0.3.0` (the same records).
    V0_3(V0_3),
}

impl<C, V3, V2, V1> Built<C, V3, V2, V1> {
    fn wit(&self) -> &'static str {
        match self {
            Built::Current(_) => "0.4.0",
            Built::V0_3(_) => "0.3.0",
            Built::V0_2(_) => "0.2.0",
            Built::V0_1(_) => "0.1.0",
        }
    }
}

impl<C, V3> Since0_3<C, V3> {
    fn wit(&self) -> &'static str {
        match self {
            Since0_3::Current(_) => "0.4.0",
            Since0_3::V0_3(_) => "0.3.0",
        }
    }
}

impl PreparedPlugin {
    pub fn kind(&self) -> PluginKind {
        match self {
            PreparedPlugin::RateLimiter(_) => PluginKind::RateLimiter,
            PreparedPlugin::Router(_) => PluginKind::Router,
            PreparedPlugin::Projector(_) | PreparedPlugin::RelationProjector(_) => PluginKind::Projector,
            PreparedPlugin::RelationPolicy(_) => PluginKind::RelationPolicy,
        }
    }

    /// The version of the `strand:plugin` package the component was built against.
    pub fn wit_version(&self) -> &'static str {
        match self {
            PreparedPlugin::RateLimiter(built) => built.wit(),
            PreparedPlugin::Router(built) => built.wit(),
            PreparedPlugin::Projector(built) => built.wit(),
            PreparedPlugin::RelationProjector(built) => built.wit(),
            PreparedPlugin::RelationPolicy(built) => built.wit(),
        }
    }

    /// Whether it is a relation projector: its spaces are built from every edge, not the follows alone.
    pub fn receives_every_kind(&self) -> bool {
        matches!(self, PreparedPlugin::RelationProjector(_))
    }

    /// Whether a projector is called for `event`: a relation projector for every kind, the others for
    /// follows beginning and ending (their spaces keep no bookkeeping of the rest either).
    pub fn receives(&self, event: &RelationEvent) -> bool {
        self.receives_every_kind() || event.action().is_some()
    }
}

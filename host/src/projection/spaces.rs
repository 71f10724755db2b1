//! The spaces of a projector's versions over their life: each version of a tenant's projector fills a space
//! of its own (`tenant:plugin@version:…`), so a shadow is built and fed beside the active version, and
//! promoting it moves no data. A space whose version stops being live — replaced, promoted over, aborted,
//! removed — is dropped ([`retire`]); [`diff`] compares the active space with the shadow's before a promote.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::cache::{Cache, CacheError, PageStart, Space};
use crate::ops::metrics::PROJECTION_RETIRE_FAILURES;
use crate::plugins::{PluginKind, PluginRegistry, PluginSlot};

/// Drops the data of the slot's versions in `was_live` that [`PluginRegistry::live_versions`] no longer
/// lists (nothing for a rate limiter or router). A failure leaves the data behind, unread: it is logged and
/// counted, and the change that retired the version stands.
pub async fn retire(cache: &Cache, registry: &PluginRegistry, slot: &PluginSlot, was_live: &[i64]) {
    if slot.kind != PluginKind::Projector {
        return;
    }
    let live = registry.live_versions(slot);
    for version in was_live.iter().filter(|version| !live.contains(version)) {
        let space = Space { tenant: slot.tenant.as_str(), plugin: &slot.name, version: *version };
        match cache.clear(space).await {
            Ok(()) => tracing::info!(tenant = %slot.tenant, projector = %slot.name, version, "space retired"),
            Err(error) => {
                metrics::counter!(PROJECTION_RETIRE_FAILURES.name, "projector" => slot.name.clone()).increment(1);
                tracing::error!(tenant = %slot.tenant, projector = %slot.name, version, %error,
                    "cannot drop a retired version's space; its data stays behind, unread");
            }
        }
    }
}

/// How the shadow's space compares with the active one's.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SpaceDiff {
    pub active: SpaceSummary,
    pub shadow: SpaceSummary,
    /// Keys (named without the space's prefix) present in one space only, up to `sample` of each.
    pub only_in_active: Vec<String>,
    pub only_in_shadow: Vec<String>,
    /// Keys in both spaces whose values were compared: an even sample of up to `sample` of them.
    pub compared: usize,
    /// The compared keys whose values differ.
    pub differing: Vec<KeyDifference>,
}

/// One version's space.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SpaceSummary {
    pub version: i64,
    /// Whether a build completed it (live events apply, and reads would be served from it).
    pub complete: bool,
    pub counters: usize,
    pub sorted_sets: usize,
    pub values: usize,
}

/// One key whose value differs, rendered as text (a sorted set: its first members, `member@score`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyDifference {
    pub key: String,
    pub active: Option<String>,
    pub shadow: Option<String>,
}

/// Most members of a sorted set a diff compares.
const MEMBERS_COMPARED: usize = 100;

/// Compares the `active` and `shadow` spaces: key counts by kind, keys in one only, and the values of an
/// even sample of up to `sample` keys in both. It scans both spaces: an operator's tool, not a request path.
pub async fn diff(cache: &Cache, active: Space<'_>, shadow: Space<'_>, sample: usize) -> Result<SpaceDiff, CacheError> {
    let (active_keys, shadow_keys) = (relative_keys(cache, active).await?, relative_keys(cache, shadow).await?);
    let in_shadow: BTreeSet<&String> = shadow_keys.iter().collect();
    let in_active: BTreeSet<&String> = active_keys.iter().collect();
    let only = |keys: &[String], other: &BTreeSet<&String>| -> Vec<String> {
        keys.iter().filter(|key| !other.contains(key)).take(sample).cloned().collect()
    };
    let common: Vec<&String> = active_keys.iter().filter(|key| in_shadow.contains(key)).collect();
    let step = (common.len() / sample.max(1)).max(1);
    let mut differing = Vec::new();
    let mut compared = 0;
    for key in common.into_iter().step_by(step).take(sample) {
        compared += 1;
        let (in_active, in_shadow) = (value(cache, active, key).await?, value(cache, shadow, key).await?);
        if in_active != in_shadow {
            differing.push(KeyDifference { key: key.clone(), active: in_active, shadow: in_shadow });
        }
    }
    Ok(SpaceDiff {
        active: summary(cache, active, &active_keys).await?,
        shadow: summary(cache, shadow, &shadow_keys).await?,
        only_in_active: only(&active_keys, &in_shadow),
        only_in_shadow: only(&shadow_keys, &in_active),
        compared,
        differing,
    })
}

/// `space`'s data keys without the space's prefix.
async fn relative_keys(cache: &Cache, space: Space<'_>) -> Result<Vec<String>, CacheError> {
    Ok(cache.data_keys(space).await?.iter().map(|key| space.relative(key).to_owned()).collect())
}

async fn summary(cache: &Cache, space: Space<'_>, keys: &[String]) -> Result<SpaceSummary, CacheError> {
    let count = |tag: &str| keys.iter().filter(|key| key.starts_with(tag)).count();
    Ok(SpaceSummary {
        version: space.version,
        complete: cache.built_by(space).await?.is_some(),
        counters: count("c."),
        sorted_sets: count("z."),
        values: count("v."),
    })
}

/// The value of `space`'s key `relative` as text.
async fn value(cache: &Cache, space: Space<'_>, relative: &str) -> Result<Option<String>, CacheError> {
    let Some(key) = space.absolute(relative) else { return Ok(None) };
    if !relative.starts_with("z.") {
        return Ok(cache.texts(&[key]).await?.pop().flatten());
    }
    let members = cache.descending(&key, PageStart::Rank(0), MEMBERS_COMPARED).await?;
    let rendered: Vec<String> = members.iter().map(|(member, score)| format!("{member}@{score}")).collect();
    Ok((!rendered.is_empty()).then(|| rendered.join(" ")))
}

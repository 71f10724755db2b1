//! `strand reconcile`: compares the truth (`following`) with what is derived from it — the `follower` table
//! (every pair), the truth's own `follow_counts` (every user), the bundled counters in the cache (every user), a sample of the bundled list caches — and
//! reports every difference. A clean report is the end condition of the fault suites.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use strand_contract::{FOLLOWERS, FOLLOWING, FOLLOWINGS, FOLLOW_COUNTS, FOLLOW_LISTS};

use crate::cache::{Cache, CacheError, PageStart, Space};
use crate::db::Database;
use crate::graph::{every_follow_pair, every_kept_count, FollowPairs, RelStatus};

/// Every difference found.
#[derive(Debug, Default)]
pub struct Report {
    pub pairs_checked: u64,
    pub users_checked: u64,
    pub lists_checked: u64,
    pub differences: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.differences.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} pairs, {} users' counters, {} lists: {} differences",
            self.pairs_checked,
            self.users_checked,
            self.lists_checked,
            self.differences.len()
        )?;
        self.differences.iter().try_for_each(|d| writeln!(f, "  {d}"))
    }
}

/// Why reconciliation could not run (a difference is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Compares the truth with the follower table and, with a `cache`, the bundled counters and `sample_lists`
/// users' following lists.
pub async fn reconcile(db: &Database, cache: Option<&Cache>, sample_lists: usize) -> Result<Report, ReconcileError> {
    let mut report = Report::default();
    let truth: BTreeMap<_, _> = every_follow_pair(db, FollowPairs::Following).await?.into_iter().collect();
    let projected: BTreeMap<_, _> = every_follow_pair(db, FollowPairs::Follower).await?.into_iter().collect();
    report.pairs_checked = truth.len() as u64;
    for (pair, state) in &truth {
        match projected.get(pair) {
            Some(projected) if projected == state => {}
            other => report.differences.push(format!("follower {pair:?}: truth {state:?}, projected {other:?}")),
        }
    }
    // A pair of an account erased before erasure kept pairs' versions is gone from the truth; the follower
    // table keeps it ended (status 0), its last version keeping redelivered events out. Any other row the truth
    // lacks is a difference.
    let erased: Vec<&(String, i64, i64)> =
        projected.iter().filter(|(pair, _)| !truth.contains_key(*pair)).map(|(pair, _)| pair).collect();
    for pair in &erased {
        if projected[*pair].0 != RelStatus::None {
            report.differences.push(format!("follower {pair:?}: not in the truth"));
        }
    }
    let mut followings: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut followers: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut lists: BTreeMap<(String, i64), BTreeSet<i64>> = BTreeMap::new();
    // An erased pair's users count it no more (an erased account's counters are checked to be 0).
    for (tenant, from, to) in erased {
        followings.entry((tenant.clone(), *from)).or_default();
        followers.entry((tenant.clone(), *to)).or_default();
    }
    for ((tenant, from, to), (status, _)) in &truth {
        let active = i64::from(*status == RelStatus::Active);
        *followings.entry((tenant.clone(), *from)).or_default() += active;
        *followers.entry((tenant.clone(), *to)).or_default() += active;
        let list = lists.entry((tenant.clone(), *from)).or_default();
        if active == 1 {
            list.insert(*to);
        }
    }
    check_counts(db, &followings, &followers, &mut report).await?;
    let Some(cache) = cache else { return Ok(report) };

    for (counter, counts) in [(FOLLOWINGS, &followings), (FOLLOWERS, &followers)] {
        let keys: Vec<String> = counts
            .keys()
            .map(|(tenant, user)| Space::bundled(tenant, FOLLOW_COUNTS).counter(counter, [*user]))
            .collect();
        for (chunk, expected) in keys.chunks(1000).zip(counts.values().collect::<Vec<_>>().chunks(1000)) {
            for ((key, cached), expected) in chunk.iter().zip(cache.texts(chunk).await?).zip(expected) {
                let cached: Option<i64> = cached.and_then(|c| c.parse().ok());
                if cached.unwrap_or(0) != **expected {
                    report.differences.push(format!("{key}: truth {expected}, cached {cached:?}"));
                }
            }
        }
        report.users_checked += counts.len() as u64;
    }
    // An even sample over the users, not the first few.
    let step = (lists.len() / sample_lists.max(1)).max(1);
    for ((tenant, user), expected) in lists.iter().step_by(step).take(sample_lists) {
        let key = Space::bundled(tenant, FOLLOW_LISTS).sorted_set(FOLLOWING, [*user]);
        let cached = cache.descending(&key, PageStart::Rank(0), usize::MAX).await?;
        let cached: BTreeSet<i64> = cached.iter().filter_map(|(m, _)| m.parse().ok()).collect();
        if cached != *expected {
            report.differences.push(format!("{key}: truth {expected:?}, cached {cached:?}"));
        }
        report.lists_checked += 1;
    }
    Ok(report)
}

/// The truth's own counts (`follow_counts`, kept by every write) against the follows they count.
async fn check_counts(
    db: &Database,
    followings: &BTreeMap<(String, i64), i64>,
    followers: &BTreeMap<(String, i64), i64>,
    report: &mut Report,
) -> Result<(), sqlx::Error> {
    let kept: BTreeMap<(String, i64), (i64, i64)> = every_kept_count(db).await?.into_iter().collect();
    let users: BTreeSet<&(String, i64)> = followings.keys().chain(followers.keys()).chain(kept.keys()).collect();
    for user in users {
        let counted = (followings.get(user).copied().unwrap_or(0), followers.get(user).copied().unwrap_or(0));
        let held = kept.get(user).copied().unwrap_or((0, 0));
        if held != counted {
            report.differences.push(format!("follow_counts {user:?}: truth {counted:?}, kept {held:?}"));
        }
    }
    Ok(())
}

//! Relationship status (`GET /v1/me/relationships`, the follow button on every profile: follows and requests
//! both ways, blocks both ways, mutes) read from the truth for callers with 10, 10k and 1M followers, on
//! SQLite and MariaDB: its cost should depend on the ids asked about, not on either side's follower count.
//! Then known followers (`GET /v1/users/{id}/known_followers` and its `/count`): a caller following 5 000,
//! half of whom — its older half, so a page passes over the newer 2 500 first — follow a user with
//! 1 000 000 followers; bounded by the caller's follows, not the target's followers. Seeded
//! with bulk SQL; figures printed, never asserted.
//!
//! `cargo bench -p strand --bench relationships` (`STRAND_BENCH_READS`, `STRAND_BENCH_CONCURRENCY`).

use std::sync::Arc;

use strand::db::{Database, DatabaseKind};
use strand::graph::{self, Act, Direction, PageRequest, Position, RelationCommand, TenantId, UserId};
use strand_test_support::bench::{measure, setting};
use strand_test_support::Backend;

/// Followers of each benchmarked caller; caller `i` is user `i + 1`.
const FOLLOWERS: [i64; 3] = [10, 10_000, 1_000_000];
/// The callers' followers are users from here on.
const FIRST_FOLLOWER: i64 = 10_000_000;
/// The ten users each read asks about (the first five follow every caller), each following
/// [`FOLLOWED_BY_ASKED`] users from [`FIRST_FOLLOWED`] on.
const ASKED: i64 = 100;
const FOLLOWED_BY_ASKED: i64 = 100_000;
const FIRST_FOLLOWED: i64 = 20_000_000;
/// The known-followers caller, following [`CALLER_FOLLOWS`] users of whom half follow the 1M-follower user.
const KNOWING: i64 = 60;
const CALLER_FOLLOWS: i64 = 5_000;

#[tokio::main]
async fn main() {
    let reads = setting("STRAND_BENCH_READS", 4000);
    let concurrency = setting("STRAND_BENCH_CONCURRENCY", 8);
    let tenant: TenantId = "bench".parse().expect("a tenant");
    println!(
        "relationships: 10 ids per read (5 followers, 5 not, each following {FOLLOWED_BY_ASKED}), {reads} reads, \
         {concurrency} concurrent"
    );
    for backend in [Backend::Sqlite, Backend::MariaDb] {
        let database = backend.fresh_database().await.expect("a bench database");
        let db = Arc::new(Database::open(&database.url, concurrency as u32).await.expect("the bench database"));
        // The users asked about follow many themselves: five of them follow every caller.
        for k in 0..10 {
            seed(&db, &tenant, ASKED + k, Direction::Following, FIRST_FOLLOWED, FOLLOWED_BY_ASKED).await;
        }
        for (i, followers) in FOLLOWERS.into_iter().enumerate() {
            let me = i as i64 + 1;
            seed(&db, &tenant, me, Direction::Followers, FIRST_FOLLOWER, followers).await;
            for k in 0..5 {
                seed(&db, &tenant, ASKED + k, Direction::Following, me, 1).await;
            }
            // One of the others is blocked and one muted by the caller: every edge of the status is read.
            let caller = UserId::try_from(me).expect("positive");
            for (act, other) in
                [(Act::Block, ASKED + 5), (Act::Mute { expires_at_ms: None, notifications: true }, ASKED + 6)]
            {
                let other = UserId::try_from(other).expect("positive");
                graph::change(&db, RelationCommand::new(&tenant, caller, act, other)).await.expect("a relation");
            }
        }
        let last_followers = FIRST_FOLLOWER + FOLLOWERS[2];
        seed(&db, &tenant, KNOWING, Direction::Following, last_followers - CALLER_FOLLOWS / 2, CALLER_FOLLOWS).await;
        let others: Arc<Vec<UserId>> =
            Arc::new((0..10).map(|k| UserId::try_from(ASKED + k).expect("positive")).collect());
        for (i, followers) in FOLLOWERS.into_iter().enumerate() {
            let me = UserId::try_from(i as i64 + 1).expect("positive");
            let measured = measure(concurrency, reads / concurrency, |_, _| {
                let (db, tenant, others) = (db.clone(), tenant.clone(), others.clone());
                async move {
                    let found = graph::relationships(&db, &tenant, me, &others).await.expect("a read");
                    assert_eq!(found.iter().filter(|r| r.followed_by).count(), 5);
                }
            })
            .await;
            measured.print(&format!("{backend:?}, caller with {followers} followers"), "reads");
        }
        let (knowing, celebrity) =
            (UserId::try_from(KNOWING).expect("positive"), UserId::try_from(3).expect("positive"));
        let measured = measure(concurrency, reads / concurrency / 4, |_, _| {
            let (db, tenant) = (db.clone(), tenant.clone());
            async move {
                let first = PageRequest { position: Position::Start, limit: 20 };
                let known = graph::known_followers(&db, &tenant, knowing, celebrity, first).await.expect("a read");
                // The newest 2 500 follows follow nobody asked about: the page stops at its walk's bound.
                assert!(known.items.is_empty() && known.has_more);
            }
        })
        .await;
        measured
            .print(&format!("{backend:?}, known followers, first page of 20 (walks 250 of 5k follows; 1M)"), "reads");
        let measured = measure(concurrency, reads / concurrency / 4, |_, _| {
            let (db, tenant) = (db.clone(), tenant.clone());
            async move {
                let total = graph::known_followers_count(&db, &tenant, knowing, celebrity).await.expect("a read");
                assert_eq!(total, CALLER_FOLLOWS / 2);
            }
        })
        .await;
        measured.print(&format!("{backend:?}, known followers' count (5k follows, 1M)"), "reads");
    }
}

/// `count` rows inserted by one statement: `user` follows users `first..` (`Direction::Following`) or they
/// follow `user` (`Direction::Followers`).
async fn seed(db: &Database, tenant: &TenantId, user: i64, direction: Direction, first: i64, count: i64) {
    // The first of the two bound users is the follower.
    let (from, to, a, b) = match direction {
        Direction::Following => ("?", "? + i", user, first),
        Direction::Followers => ("? + i", "?", first, user),
    };
    let sql = match db.kind() {
        DatabaseKind::Sqlite => format!(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) \
             SELECT ?, {from}, {to}, 1, 1, i, i FROM n"
        ),
        DatabaseKind::MySql => format!(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             SELECT ?, {from}, {to}, 1, 1, i, i FROM (SELECT seq AS i FROM seq_0_to_999999 WHERE seq < ?) n"
        ),
    };
    let query = sqlx::query(&sql);
    let query = match db.kind() {
        DatabaseKind::Sqlite => query.bind(count).bind(tenant.as_str()).bind(a).bind(b),
        DatabaseKind::MySql => query.bind(tenant.as_str()).bind(a).bind(b).bind(count),
    };
    query.execute(db.writer()).await.expect("seeding follows");
}

//! The follower table equals the truth whatever order and however often the events arrive.

use std::collections::BTreeSet;

use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::outbox::ChangeEvent;
use strand::projection::follower;
use strand_test_support::{on_every_backend, Backend};

on_every_backend!(redelivered_and_reordered_events_leave_the_follower_table_equal_to_the_truth);

/// The outbox's events, in commit order (the relay is off in this test).
async fn outbox_events(db: &Database) -> Vec<ChangeEvent> {
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM outbox ORDER BY id").fetch_all(db.reader()).await.unwrap();
    payloads.iter().map(|p| serde_json::from_str(p).unwrap()).collect()
}

/// The rows `sql` selects, as a set of triples.
async fn active(db: &Database, sql: &str) -> BTreeSet<(i64, i64, i64)> {
    sqlx::query_as::<_, (i64, i64, i64)>(sql).fetch_all(db.reader()).await.unwrap().into_iter().collect()
}

async fn redelivered_and_reordered_events_leave_the_follower_table_equal_to_the_truth(backend: Backend) {
    let database = backend.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 8).await.unwrap();
    let tenant: TenantId = "acme".parse().unwrap();
    for step in 0..300_i64 {
        let (from, to) = (1 + step % 7, 1 + (step * 5 + 3) % 11);
        if from != to {
            let follow = (step / 7) % 3 != 1;
            let (from, to) = (UserId::try_from(from).unwrap(), UserId::try_from(to).unwrap());
            graph::change(
                &db,
                if follow {
                    graph::RelationCommand::follow(&tenant, from, to)
                } else {
                    graph::RelationCommand::unfollow(&tenant, from, to)
                },
            )
            .await
            .unwrap();
        }
    }
    let events = outbox_events(&db).await;

    // Every batch delivered twice, the second time backwards (one pair's events out of order included).
    // A pair recurs every 77 steps: batches of 100 hold some pairs twice.
    for batch in events.chunks(100) {
        follower::apply(&db, batch).await.unwrap();
        let reversed: Vec<_> = batch.iter().rev().cloned().collect();
        follower::apply(&db, &reversed).await.unwrap();
    }
    // Then a replay of everything, newest first.
    let backwards: Vec<_> = events.iter().rev().cloned().collect();
    follower::apply(&db, &backwards).await.unwrap();

    let truth = active(
        &db,
        "SELECT from_user_id, to_user_id, created_at FROM following WHERE tenant_id = 'acme' AND rel_status = 1",
    )
    .await;
    let projected = active(
        &db,
        "SELECT from_user_id, to_user_id, created_at FROM follower WHERE tenant_id = 'acme' AND rel_status = 1",
    )
    .await;
    assert!(!truth.is_empty());
    assert_eq!(projected, truth, "active pairs and their follow times");
    let versions = "SELECT from_user_id, to_user_id, version FROM";
    assert_eq!(
        active(&db, &format!("{versions} follower")).await,
        active(&db, &format!("{versions} following")).await,
        "every pair at its latest version"
    );
}

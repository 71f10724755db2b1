//! Projections of the bus's events, against real databases.

mod backfill;
mod effects;
mod faults;
mod follower;
mod reconcile;
mod worker;

use futures::future::join_all;
use strand_test_support::TestServer;

/// Users 1..=6 of `tenant` following and unfollowing each other concurrently over HTTP.
pub async fn storm(server: &TestServer, tenant: &str, round: i64) {
    let writers = (1..=6).map(|user| {
        let client = server.client(tenant, user);
        async move {
            for i in 0..25 {
                let target = 1 + (user * 7 + i * 5 + round) % 6;
                if target != user {
                    if (i + round) % 4 == 3 {
                        client.unfollow(target).await
                    } else {
                        client.follow(target).await
                    };
                }
            }
        }
    });
    join_all(writers).await;
}

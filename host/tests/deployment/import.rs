//! The seed system's own `following` table (its schema: `from_user_id`, `to_user_id`, `rel_status`,
//! `created_at` as a DATETIME) imported twice by `strand import --from-mysql` into a production-shaped
//! deployment: the second run changes nothing, blocks and privacy hold, `followed_at` is the seed's time, and
//! the follower table and the projectors' counts and lists, built again from the truth, equal it.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use strand::cache::{Cache, RedisCache, Space};
use strand::db::Database;
use strand_test_support::{token, TEST_SECRET};

use super::{answering, port, Deployment};

/// Users of the seed graph; each follows the next `FANOUT`.
const USERS: i64 = 400;
const FANOUT: i64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seed_systems_table_imports_twice_from_mariadb_with_the_second_run_changing_nothing() {
    let deployment = Deployment::new().await;
    let (api_port, relay_port, worker_port) = (port(), port(), port());
    let _relay = deployment.relay("relay", relay_port);
    let _worker = deployment.worker("worker", worker_port, Some("worker"));
    let node = deployment.api("api", api_port);
    answering(api_port, &node).await;
    let base = format!("http://127.0.0.1:{api_port}");
    let http = reqwest::Client::new();
    let as_user = |user: i64| token(TEST_SECRET, &user.to_string(), "seeded", 3600);
    // Before the import: 3 is private, 4 blocks 5.
    let private = http.put(format!("{base}/v1/me/settings")).bearer_auth(as_user(3));
    assert_eq!(private.json(&serde_json::json!({"private": true})).send().await.unwrap().status(), 200);
    let block = http.put(format!("{base}/v1/me/blocks/5")).bearer_auth(as_user(4)).send().await.unwrap();
    assert!(block.status().is_success(), "{}", block.status());

    // The seed database beside Strand's, on the same server.
    let seed_url = format!("{}_seed", deployment.database_url());
    let (server_url, seed_name) = seed_url.rsplit_once('/').unwrap();
    let mut root = mysql_async::Conn::from_url(format!("{server_url}/mysql")).await.unwrap();
    root.query_drop(format!("CREATE DATABASE {seed_name}")).await.unwrap();
    let mut seed = mysql_async::Conn::from_url(&seed_url).await.unwrap();
    seed.query_drop(
        "CREATE TABLE following (id BIGINT AUTO_INCREMENT PRIMARY KEY, from_user_id BIGINT NOT NULL, \
         to_user_id BIGINT NOT NULL, rel_status TINYINT NOT NULL, created_at DATETIME NOT NULL, \
         updated_at DATETIME NOT NULL, UNIQUE KEY (from_user_id, to_user_id))",
    )
    .await
    .unwrap();
    let mut rows = Vec::new();
    for from in 1..=USERS {
        for k in 1..=FANOUT {
            let to = (from + k - 1) % USERS + 1;
            // Every seventh one was unfollowed in the seed system.
            let status = i64::from((from + k) % 7 != 0);
            rows.push(format!("({from}, {to}, {status}, '2021-03-04 05:06:07' + INTERVAL {from} MINUTE, NOW())"));
        }
    }
    for chunk in rows.chunks(2000) {
        let sql = format!(
            "INSERT INTO following (from_user_id, to_user_id, rel_status, created_at, updated_at) VALUES {}",
            chunk.join(", ")
        );
        seed.query_drop(sql).await.unwrap();
    }
    let follows: i64 = seed.query_first("SELECT COUNT(*) FROM following WHERE rel_status = 1").await.unwrap().unwrap();
    let blocked: i64 = seed
        .query_first(
            "SELECT COUNT(*) FROM following WHERE rel_status = 1 AND from_user_id IN (4, 5) AND to_user_id IN (4, 5)",
        )
        .await
        .unwrap()
        .unwrap();
    let to_private: i64 = seed
        .query_first("SELECT COUNT(*) FROM following WHERE rel_status = 1 AND to_user_id = 3")
        .await
        .unwrap()
        .unwrap();
    assert!(blocked > 0 && to_private > 0, "the graph has follows across the block and to the private account");

    let import = |name: &'static str| {
        let process =
            deployment.cli(name, &["import", "--tenant", "seeded", "--from-mysql", &seed_url, "--server", &base]);
        async move {
            let log = process.finished(Duration::from_secs(120)).await;
            let report = &log[log.find("{\n").unwrap_or_else(|| panic!("no report:\n{log}"))..];
            serde_json::from_str::<serde_json::Value>(report).unwrap_or_else(|e| panic!("{e}: {log}"))
        }
    };
    let first = import("import-1").await;
    assert_eq!(first["lines"], follows, "{first}");
    assert_eq!(first["blocked"], blocked, "{first}");
    assert_eq!(first["requested"], to_private, "follows of the private account are requests: {first}");
    assert_eq!(first["followed"], follows - blocked - to_private, "{first}");
    let second = import("import-2").await;
    assert_eq!((second["followed"].as_i64(), second["requested"].as_i64()), (Some(0), Some(0)), "{second}");
    assert_eq!(second["kept"], follows - blocked, "{second}");

    // followed_at is the seed's created_at, as the seed's server reads it.
    let seed_ms: i64 = seed
        .query_first("SELECT CAST(UNIX_TIMESTAMP(created_at) * 1000 AS SIGNED) FROM following WHERE from_user_id = 9 AND to_user_id = 10")
        .await
        .unwrap()
        .unwrap();
    let db = Database::open(&deployment.database_url(), 1).await.unwrap();
    let (followed_at, version): (i64, i64) = sqlx::query_as(
        "SELECT created_at, version FROM following WHERE tenant_id = 'seeded' AND from_user_id = 9 AND to_user_id = 10",
    )
    .fetch_one(db.reader())
    .await
    .unwrap();
    assert_eq!((followed_at, version), (seed_ms, 1));

    // The projectors' spaces are built again from the truth, and every projection equals it.
    let cache = Cache::Redis(RedisCache::connect(deployment.redis_url()).await.unwrap());
    let space = Space { tenant: "seeded", plugin: "follow-counts", version: 0 };
    tokio::time::timeout(Duration::from_secs(120), async {
        while cache.built_by(space).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("follow-counts not built again:\n{}", deployment.logs(&["api", "worker"])));
    match deployment.settled(Duration::from_secs(120)).await {
        Ok(report) => assert!(report.pairs_checked as i64 >= follows - blocked, "{report}"),
        Err(state) => panic!("not settled: {state}\n{}", deployment.logs(&["api", "relay", "worker"])),
    }
    let counts = super::counts(&base, &as_user(10), 10).await;
    let expected: i64 = seed
        .query_first("SELECT COUNT(*) FROM following WHERE rel_status = 1 AND to_user_id = 10")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counts["followers"], expected, "{counts}");
}

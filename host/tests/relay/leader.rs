//! One active relay per MySQL database; a standby takes over when the leader goes away.

use std::sync::Arc;
use std::time::Duration;

use strand::bus::{EmbeddedBus, Publisher, Topology};
use strand::db::{Database, LOCK_OF_THIS_DATABASE};
use strand::graph::{self, UserId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand::relay::{BinlogPosition, Checkpoint, Leadership, Outlet, PollRelay, RELAY_LOCK};
use strand_test_support::{wait_until, Backend};
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lock_has_one_holder_per_database_and_is_freed_when_its_connection_dies() {
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 8).await.unwrap();
    let name = format!("leader-test-{}", std::process::id());
    let first = Leadership::try_acquire(&db, &name).await.unwrap().expect("a free lock");
    assert!(Leadership::try_acquire(&db, &name).await.unwrap().is_none(), "one holder at a time");
    // Another database of the same server (another deployment, or a cell) has a leader of its own: the
    // server's user locks are server-wide, the relay's is not.
    let neighbour = Backend::MariaDb.fresh_database().await.unwrap();
    let neighbour = Database::open(&neighbour.url, 2).await.unwrap();
    assert!(Leadership::try_acquire(&neighbour, &name).await.unwrap().is_some(), "a lock per database");
    drop(first); // as a crashed leader's connection closes
    let db2 = db.clone();
    let taken = || {
        let (db, name) = (db2.clone(), name.clone());
        async move { Leadership::try_acquire(&db, &name).await.unwrap().is_some() }
    };
    wait_until("a standby can take the lock", Duration::from_secs(30), taken).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_relay_takes_over_when_the_leader_stops() {
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 16).await.unwrap();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let plugins = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    let bus = EmbeddedBus::new(db.clone());
    let relay = || {
        let outlet = Outlet::new(plugins.clone(), Publisher::Embedded(bus.clone()), Topology::new("strand."));
        PollRelay::new(db.clone(), outlet, Duration::from_millis(10))
    };
    let start = |relay: PollRelay| {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(relay.run(async move {
            let _stop_or_drop = stopped.await;
        }));
        (stop, task)
    };
    let tenant = "acme".parse().unwrap();
    let follow = |from: i64| {
        let (db, tenant) = (db.clone(), &tenant);
        async move {
            let (from, to) = (UserId::try_from(from).unwrap(), UserId::try_from(from + 1000).unwrap());
            graph::change(&db, graph::RelationCommand::follow(tenant, from, to)).await.unwrap();
        }
    };
    let published = |n: usize| {
        let bus = bus.clone();
        move || {
            let bus = bus.clone();
            async move { bus.read("strand.following", 0, 1000).await.unwrap().len() == n }
        }
    };

    let (stop_leader, leader) = start(relay());
    for user in 1..=5 {
        follow(user).await;
    }
    wait_until("the leader publishes", Duration::from_secs(30), published(5)).await;
    let (stop_standby, standby) = start(relay());
    drop(stop_leader);
    leader.await.unwrap();
    for user in 6..=10 {
        follow(user).await;
    }
    wait_until("the standby took over and published", Duration::from_secs(30), published(10)).await;
    drop(stop_standby);
    standby.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poll_relay_that_loses_and_retakes_the_lock_forgets_a_binlog_checkpoint_left_meanwhile() {
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 8).await.unwrap();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let plugins = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    let outlet = Outlet::new(plugins, Publisher::Embedded(EmbeddedBus::new(db.clone())), Topology::new("strand."));
    let (stop, stopped) = oneshot::channel::<()>();
    let relay = tokio::spawn(PollRelay::new(db.clone(), outlet, Duration::from_millis(10)).run(async move {
        let _stop_or_drop = stopped.await;
    }));
    let holder = || async {
        sqlx::query_scalar::<_, Option<i64>>(&format!("SELECT IS_USED_LOCK({LOCK_OF_THIS_DATABASE})"))
            .bind(RELAY_LOCK)
            .fetch_one(db.reader())
            .await
            .unwrap()
    };
    wait_until("the poll relay leads", Duration::from_secs(30), || async { holder().await.is_some() }).await;
    // While its lock was lost, a binlog relay led and left a checkpoint; then the poll relay retakes the
    // lock in one check: the checkpoint is stale once it deletes outbox rows, so it must go.
    let mut conn = db.writer().acquire().await.unwrap();
    let position = BinlogPosition { file: "mysql-bin.000001".into(), pos: 4 };
    Checkpoint::save(&mut conn, &position, 1).await.unwrap();
    drop(conn);
    // The lock's connection is killed; under load the relay may be between two holds at the moment we look,
    // so we look until one holds it, and a holder gone before the KILL is looked for again.
    let killed = std::sync::Mutex::new(None);
    wait_until("the lock's holder is killed", Duration::from_secs(30), || async {
        let Some(lock_connection) = holder().await else { return false };
        let gone = sqlx::query(&format!("KILL {lock_connection}")).execute(db.writer()).await.is_ok();
        *killed.lock().unwrap() = Some(lock_connection);
        gone
    })
    .await;
    let lock_connection = killed.lock().unwrap().expect("a holder was killed");
    wait_until("the retaken lock forgets the checkpoint", Duration::from_secs(30), || async {
        Checkpoint::load(&db).await.unwrap().is_none()
    })
    .await;
    assert_ne!(holder().await, Some(lock_connection), "the lock was taken again on a new connection");
    drop(stop);
    relay.await.unwrap();
}
